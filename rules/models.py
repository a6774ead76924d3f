# The rule set (DESIGN §5) arrives with the rules issue; until then every
# action is routed to the default reviewer group.
