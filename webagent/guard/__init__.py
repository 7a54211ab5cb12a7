"""What guards a run against what others hand it: ``navigation.py`` (``NavigationPolicy``: which hosts a
run may reach, allowed and blocked hosts, private networks; pure), ``hosts.py`` (a URL's host as
Chromium reads it), ``secrets.py`` (``Secrets``: ``{{NAME}}`` placeholders, typed only on their hosts,
and the redaction of everything that leaves the agent) and ``urls.py`` (``normalize_url``). The
browser enforces the policy (``webagent.browser.guard``); docs/security.md says what is guarded.
"""
