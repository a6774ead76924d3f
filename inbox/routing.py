# The live inbox websocket (/ws/inbox) arrives with the inbox issue.
websocket_urlpatterns: list = []
