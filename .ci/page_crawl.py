"""The installed wheel's pages, opened as a signed-in superuser: all 200 (issue 43).

Every link of the admin index, each changelist's first object, every inbox page, the
dashboard, an action's page, the gateway's review-and-accept page and the API docs. A file
the wheel leaves out (a template, a template tag library, a static file) is a 500 here, where
the suite, which runs from the source tree, never sees it. Standard library only: it runs
with the system python3 beside .ci/install_check.py, which calls :func:`crawl`.
"""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser

# One object of each model that is cheap to make, so each changelist has a first object to open;
# printed: the pending pin's id (the gateway's review page).
SEED = """
from django.contrib.auth.models import Group, User
from gateway.models import PinnedTool, Upstream
from slackapp.models import SlackChannel, SlackUserLink
from webpush.models import PushSubscription

upstream = Upstream.objects.create(name="crawl", url="http://127.0.0.1:9/mcp")
pin = PinnedTool.objects.create(
    upstream=upstream,
    tool="refund",
    pending_definition={"name": "refund", "inputSchema": {"type": "object"}},
    pending_sha256="0" * 64,
)
group = Group.objects.get_or_create(name="reviewers")[0]
SlackChannel.objects.create(group=group, channel="C0123ABCD")
rita = User.objects.get(username="rita")
SlackUserLink.objects.create(slack_user_id="U0123ABCD", user=rita)
PushSubscription.objects.create(
    user=rita, endpoint="https://push.example.com/send/1", p256dh="x" * 87, auth="y" * 22
)
print(pin.pk)
"""

RULES = """\
rules:
  - name: crawl reviews every refund
    kind: payment.refund
    then: review
"""


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def links(html: str) -> list[str]:
    parser = Links()
    parser.feed(html)
    return parser.hrefs


class Browser:
    """A cookie-keeping client that follows redirects; answers (status, body, final URL)."""

    def __init__(self, base: str):
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def open(self, path: str, data: dict | None = None) -> tuple[int, str, str]:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        request = urllib.request.Request(self.base + path, data=body)
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.read().decode(errors="replace"), response.url
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace"), exc.url

    def sign_in(self, username: str, password: str) -> None:
        status, _, _ = self.open("/admin/login/?next=/admin/")
        assert status == 200, f"/admin/login/ answered {status}"
        token = next(c.value for c in self.cookies if c.name == "csrftoken")
        form = {
            "csrfmiddlewaretoken": token,
            "username": username,
            "password": password,
            "next": "/admin/",
        }
        status, body, url = self.open("/admin/login/?next=/admin/", form)
        if status != 200 or urllib.parse.urlsplit(url).path != "/admin/":
            raise SystemExit(f"page-crawl: signing in as {username} failed ({status} at {url})")


def crawl(base: str, stack, action_id: str) -> int:
    """Open every page; SystemExit naming each one that is not a 200. Returns the pages opened."""
    stack.run("audit", "verify")  # a verification run: its changelist gets a first object
    rules = stack.cwd / "crawl-rules.yaml"
    rules.write_text(RULES)
    stack.run("rules", "import", str(rules))
    pin = stack.run("shell", "--no-imports", "-c", SEED).split()[-1]
    stack.run(
        "createsuperuser",
        "--noinput",
        "--username",
        "crawl-admin",
        "--email",
        "admin@example.com",
        DJANGO_SUPERUSER_PASSWORD="crawl-admin-password-4821",
    )
    browser = Browser(base)
    browser.sign_in("crawl-admin", "crawl-admin-password-4821")
    failures: list[str] = []
    opened: set[str] = set()

    def visit(path: str) -> str:
        opened.add(path)
        status, body, _ = browser.open(path)
        if status != 200:
            failures.append(f"{path} -> {status}")
        return body

    index = visit("/admin/")
    pages = sorted(
        {
            href.split("#")[0]
            for href in links(index)
            if href.startswith("/") and "logout" not in href
        }
    )
    for page in pages:
        body = visit(page)
        changelist = re.fullmatch(r"/admin/(\w+)/(\w+)/", page)
        if changelist:
            first = re.search(
                rf'href="(/admin/{changelist[1]}/{changelist[2]}/[^"/]+/change/)"', body
            )
            if first:
                visit(first[1].replace("&amp;", "&"))
    for page in (
        "/inbox/",
        "/inbox/decided/",
        "/inbox/dashboard/",
        "/inbox/push/",
        "/inbox/offline",
        f"/inbox/actions/{action_id}",
        f"/admin/gateway/pinnedtool/{pin}/accept/",
        "/api/v1/docs",
    ):
        visit(page)
    if failures:
        raise SystemExit(
            "page-crawl: pages that are not 200 on the installed wheel:\n  "
            + "\n  ".join(failures)
            + f"\n{stack.logs()}"
        )
    changes = sum(1 for path in opened if path.endswith("/change/"))
    print(f"page-crawl: {len(opened)} pages 200 ({changes} first objects)", flush=True)
    return len(opened)
