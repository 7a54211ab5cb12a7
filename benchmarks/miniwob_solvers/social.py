"""An email inbox and a social feed: find the item by its person, then act on it."""

from __future__ import annotations

import re

from .play import Play, Stuck
from .registry import solves

#: What the task asks: (action, sender, reply text or forward recipient), from the page's fields
#: (MiniWoB's natural-language variants give them beside the utterance) or the plain goal.
EMAIL_TASK = r"""(() => {
  if (fields.by) {
    const task = fields.task || (fields.to ? 'forward' : goal.includes('trash') ? 'delete' : 'important');
    return [task === 'star' ? 'important' : task, fields.by, fields.message || fields.to || ''];
  }
  const by = bold[0];
  if (goal.includes('reply to them')) return ['reply', by, quoted[0]];
  if (goal.includes('forward that email')) return ['forward', by, bold[1]];
  if (goal.includes('trash icon')) return ['delete', by, ''];
  return ['important', by, ''];
})()"""

THREAD = "$$('#main .email-thread').find((t) => txt(t.querySelector('.email-sender')) === arg)"


@solves(
    "email-inbox",
    "email-inbox-delete",
    "email-inbox-forward",
    "email-inbox-forward-nl",
    "email-inbox-forward-nl-turk",
    "email-inbox-important",
    "email-inbox-nl-turk",
    "email-inbox-noscroll",
    "email-inbox-reply",
    "email-inbox-star-reply",
)
async def email_inbox(p: Play) -> None:
    action, sender, text = await p.read(EMAIL_TASK)
    if action == "delete":
        await p.click(f"{THREAD}.querySelector('.trash')", sender)
        return
    if action == "important":
        await p.click(f"{THREAD}.querySelector('.star')", sender)
        return
    await p.click(f"{THREAD}.querySelector('.email-sender')", sender)
    if action == "reply":
        await p.click("$('#email .email-reply')")
        await p.write("$('#reply-text')", text)
        await p.click("$('#send-reply')")
    elif action == "forward":
        await p.click("$('#email .email-forward')")
        await p.write("$('#forward .forward-sender')", text)
        await p.click("$('#send-forward')")
    else:
        raise Stuck(f"unknown email action {action}")


#: The menu entries behind "more" and the buttons under a post, by the goal's name of them.
MENU = {"Share via DM": "share", "Copy link to Tweet": "copy", "Embed Tweet": "embed", "Mute": "menu-user"}
MENU |= {"Block": "block-user", "Report": "report"}
BUTTONS = {"Reply": "reply", "Retweet": "retweet", "Like": "like", "Share": "share"}
POSTS = "$$('#area .media').filter((m) => txt(m.querySelector('.username')) === arg)"


@solves("social-media")
async def social_media(p: Play) -> None:
    user, label = await p.read("[bold[0], bold[1]]")
    if label in MENU:
        await p.click(f"{POSTS}[0].querySelector('.more')", user)
        if not await p.read(f"{POSTS}[0].querySelector('ul').offsetParent !== null", user):
            # The icon's hover image replaces its image under the pointer; until it has loaded the
            # icon has no size, and the click's press, sent with its move, lands on the post.
            raise Stuck("the post's 'more' menu did not open after a click on its icon")
        await p.click(f"{POSTS}[0].querySelector('ul li.{MENU[label]}')", user)
    else:
        await p.click(f"{POSTS}[0].querySelector('.{BUTTONS[label]}')", user)


@solves("social-media-all", "social-media-some")
async def social_media_many(p: Play) -> None:
    goal = str(await p.read("goal"))
    found = re.match(r'Click the "(.+?)" button on (?:all posts|(\d+) posts?) by (\S+) and then click Submit\.', goal)
    if found is None:
        raise Stuck(f"unread goal: {goal}")
    label, amount, user = found.groups()
    posts = int(await p.read(f"{POSTS}.length", user))
    for i in range(int(amount) if amount else posts):
        await p.click(f"{POSTS}[{i}].querySelector('.{BUTTONS[label]}')", user)
    await p.click("$('#submitRow button')")
