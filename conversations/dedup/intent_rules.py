"""The built-in intents of a Chinese question, and of an English chat formula, by rules: greetings and thanks (small
talk), "show me that again" (repeat) and "explain it differently" (elaborate). Pure functions, no I/O.

Intents are otherwise told by the nearest example vector (`decisions.intent_classify`). That cannot read Chinese with
an English embedding model (the bundled one reads Chinese characters as unknown tokens), and these formulas are few
and fixed, so a rule reads them exactly. A rule matches the whole question (its punctuation, spaces and polite
fillers aside), never a part of it: "谢谢，怎么重置密码？" asks something and is no small talk. Traditional characters
are read as Simplified ones (`chinese_text.simplified`): "謝謝" is thanks as "谢谢" is.

English chat formulas are read the same way (`english_intent_by_rules`): "thx", "say again?", "eli5" sit too far from
any example for the vectors to name them, and read as questions they were searched for and became the topic that
"show me that again" repeats. So does an English request about the last answer in a sentence of its own ("Can you
explain that differently?"), read by its words: all of them about the conversation, one asking for it again or
otherwise.
"""

from __future__ import annotations

import re

from conversations.dedup.builtins import BUILTIN_INTENTS
from conversations.dedup.chinese_text import simplified

# Said before or after the formula without changing it: please, could you, particles, "OK", and the shop's way of
# addressing either side (亲, "dear"; 客服, "support").
_BEFORE = r"(?:请问|请|麻烦你|麻烦您|麻烦|你|您|亲|客服|能不能|可不可以|能否|可以|能|帮我|给我|好的|好|嗯|那)*"
_AFTER = r"(?:好吗|好不好|可以吗|行吗|行不行|谢谢|谢谢你|谢谢您|亲|吗|吧|呢|啊|呀|哦|嘛|啦|哈)*"

_GREETING = (
    r"(?:你好|您好|你们好|大家好|嗨|哈喽|哈罗|hi|hello|hey"
    r"|早上好|上午好|中午好|下午好|晚上好|早安|早|在吗|在么|在嘛|在不在|有人吗|拜拜|再见|回见)+"
)
_THANKS = (
    r"(?:好的|好|嗯|嗯嗯|ok|明白了|知道了|懂了|收到|了解了)*"
    r"(?:谢谢|谢谢你|谢谢您|谢谢你们|谢啦|谢了|多谢|多谢了|感谢|感谢你|感谢您|非常感谢|十分感谢|太感谢了|万分感谢"
    r"|辛苦了|辛苦你了|辛苦您了|麻烦你了|麻烦您了|不客气)+"
    r"(?:你的|您的)?(?:帮助|帮忙|回答|解答|耐心解答)?(?:很有帮助|有帮助|很有用|有用)?"
    r"|好的|好滴|好哒|好嘞|明白了|知道了|懂了|收到|了解了|没问题了"
)
_THAT = r"(?:刚才的|刚刚的|之前的|前面的|上面的|上一个|上一条|上个|那个|这个|你的)?"
_ANSWER = r"(?:回答|答案|结果|内容|来源|资料|出处|话|那段话|那句话)?"
_TIMES = r"(?:一遍|一次|一下|一回|遍|次|下)?"
_REPEAT = (
    rf"(?:没听清楚?|没看清楚?|没看到)?(?:再|重新)(?:给我|帮我|跟我)?"
    rf"(?:说|讲|显示|展示|发|列|念|读|来|看|给我看|复述)(?:看|看看)?{_TIMES}{_THAT}{_ANSWER}"
    rf"|重复{_TIMES}{_THAT}{_ANSWER}"
    r"|(?:刚才|刚刚|之前|前面|上面)你?(?:说|讲|回答|显示)(?:的|了)?(?:是|些)?(?:什么|啥)"
    rf"|把?{_THAT}(?:回答|答案|结果|内容|来源|资料|出处)再?(?:发|显示|给我看|说|看)(?:看|看看)?{_TIMES}"
)
_NOT_UNDERSTOOD = (
    r"(?:我?(?:还是|还|仍然|依然)?"
    r"(?:没听懂|没看懂|不懂|不太懂|不明白|不太明白|听不懂|看不懂|没懂|没明白|不理解|没理解))"
)
_EXPLAIN = r"(?:解释|说明|说|讲|介绍|阐述)"
_MORE = r"(?:一点|一些|点|些)?"
_ELABORATE = (
    rf"{_NOT_UNDERSTOOD}?(?:能|可以)?(?:再|重新)?(?:详细|具体|仔细|深入)(?:一点|一些|点)?地?{_EXPLAIN}(?:讲|说)?{_TIMES}"
    rf"|{_NOT_UNDERSTOOD}?(?:再|重新){_EXPLAIN}{_TIMES}"
    rf"|{_NOT_UNDERSTOOD}?{_EXPLAIN}得?(?:详细|具体|清楚|简单|通俗|明白|浅显|易懂)(?:一点|一些|点|些)?"
    rf"|{_NOT_UNDERSTOOD}?换(?:个|一个|一种|种)?(?:说法|方式|角度|讲法)(?:来)?{_EXPLAIN}?{_TIMES}"
    rf"|展开(?:讲讲|说说|讲|说|解释|介绍)?{_TIMES}(?:讲讲|说说)?"
    rf"|(?:再|能)?多(?:说|讲|介绍|解释){_MORE}"
    rf"|(?:再|说得|讲得)?(?:详细|具体|仔细|通俗|简单|清楚|明白)(?:一点|一些|点|些)地?(?:{_EXPLAIN}|讲讲|说说)?{_TIMES}"
    rf"|{_NOT_UNDERSTOOD}?(?:举(?:个|一个|几个|些)?例子|举例)(?:说明|讲讲|说说)?"
    rf"|说人话"
    rf"|{_NOT_UNDERSTOOD}"
)
# "What does that mean?": read alone, without the polite fillers, so "你好是什么意思" asks about a word.
_MEANING = r"(?:这|那|这个|那个|这句话|这段话|你说的|刚才说的)?(?:是)?(?:什么|啥)意思"
_RULES = (
    ("greeting", re.compile(rf"{_BEFORE}{_GREETING}{_AFTER}")),
    ("thanks", re.compile(rf"{_BEFORE}(?:{_THANKS}){_AFTER}")),
    ("repeat", re.compile(rf"{_BEFORE}(?:{_REPEAT}){_AFTER}")),
    ("elaborate", re.compile(rf"{_BEFORE}(?:{_ELABORATE}){_AFTER}|{_MEANING}{_AFTER}")),
)
# Punctuation (ASCII and CJK), spaces and emoji-like symbols, which no rule reads.
_NOT_READ = re.compile(r"[\s\W_]+")
# No formula is longer: a longer question is an ordinary question, and the regular expressions never see it.
MAX_RULE_CHARS = 24


# English as users type it in a chat: shortened ("thx", "ty", "pls"), repeated ("thanks!!", "hello??"), on its own. The
# example vectors put these far from the tenant's examples ("thx" 0.50 from "thanks", "say again?" 0.74 from "say that
# again", under the 0.80 floor), so they were questions. Read on the words alone, lowercased, without punctuation.
_EN_PLEASE = r"(?: (?:pls|plz|please|thanks|thx))?"
_EN_ACK = r"(?:ok|okay|k|kk|cool|great|perfect|awesome|nice|alright|all right|got it|understood|makes sense|noted)"
_EN_THANKS = (
    r"(?:thx|thnx|thanks|thank you|thank u|thankyou|ty|tysm|tyvm|cheers|much appreciated|appreciate it|many thanks)"
    r"(?: (?:so much|very much|a lot|again|a million|heaps))?"
)
_EN_GREETING = (
    r"(?:hi|hello|hey|hiya|howdy|yo|sup|good (?:morning|afternoon|evening)|(?:hi|hello|hey) there"
    r"|(?:is )?(?:anyone|anybody|someone) (?:there|here)|(?:are )?(?:you|u) there"
    r"|bye|bye bye|goodbye|good bye|see you|see ya|cya)"
)
_EN_REPEAT = (
    r"(?:(?:can you |could you )?(?:say|show|send|repeat|give) (?:that|it|this|those|them) (?:again|one more time)"
    r"|(?:say|show me|repeat) again|again|come again|repeat|repeat that|repeat it|what did you say|say what"
    r"|sorry what|pardon|show (?:the )?sources(?: again)?)"
)
_EN_ELABORATE = (
    r"(?:eli5|explain like i m (?:5|five)|simpler|more simply|in plain english|in simple terms"
    r"|(?:give me )?more details?|go on|tell me more|more"
    r"|(?:can you )?give (?:me )?an example|example|an example|for example"
    r"|i (?:don t|dont|do not) (?:get it|understand|follow)|i m (?:lost|confused)|huh|what do you mean"
    r"|what does that mean|explain|explain (?:that|it)(?: (?:again|better|differently|more simply))?)"
)
_EN_RULES = (
    ("greeting", re.compile(rf"{_EN_GREETING}(?: {_EN_GREETING})*")),
    ("thanks", re.compile(rf"(?:{_EN_ACK} )*{_EN_THANKS}(?: {_EN_ACK})*|{_EN_ACK}(?: {_EN_ACK})*")),
    ("repeat", re.compile(rf"{_EN_REPEAT}{_EN_PLEASE}")),
    ("elaborate", re.compile(rf"{_EN_ELABORATE}{_EN_PLEASE}")),
)
_EN_WORD = re.compile(r"[a-z0-9]+")
# No English formula has more words: a longer message is a question, and the expressions never see it.
MAX_RULE_WORDS = 8
# Said before a formula without changing it ("hmm come again?", "oh hello"): read with them and, failing that, without.
_EN_FILLERS = frozenset(
    "hm hmm hmmm um umm uh uhh oh ah oops sorry ok okay k wait well so err erm yeah alright".split()
)

# A request about the last answer rather than about a topic: "Can you explain that differently?", "I don't get it,
# explain it another way", "go back to the previous answer". Said in too many orders for formulas, and the example
# vectors put them under the floor (the request's words are few beside the pronouns and politeness around them). Such a
# message is read by its words: every one of them talks about the conversation (`_EN_ABOUT_ANSWER`: pronouns, helpers,
# politeness, and words for answers, saying, showing, explaining, manner and understanding), and one of them asks for
# the answer again or explained otherwise. A single word outside the list ("explain the refund policy", "why was I
# charged again", "show me my invoices") makes it a question, whatever else it says. The list's nouns are what an
# answer has (its sources, links, steps, parts, details), not what a help centre is asked about; "message" is left out
# for that reason.
_EN_ABOUT_ANSWER = frozenset(
    """
    i m me my you u your ur it its s that this those these them what whats is was were be are am the a an to for of in
    on at by with and but or so then just still also too very really bit little lot some there here now please pls plz
    can could would will do does did don didn doesn t dont didnt doesnt not no yeah ok okay hmm hm um uh sorry well
    wait huh oh ah wdym go back try get got give tell make let know like way words word terms term time once one more
    answer answers response reply explanation sources source links link said say saying mean means meant meaning
    same different differently another other simple simpler simply easy easier clear clearer clearly better
    detail details detailed deeper further specific plain english five 5 beginner kid layman step
    steps last previous earlier before through down confused confusing lost unclear understand understood follow
    catch missed sense technical complicated repeat repeated resend re send post show display explain explaining
    explained elaborate rephrase reword clarify simplify expand describe break walk dumb eli5 example examples info
    information sure again quite fully totally makes any hear couldn couldnt never im thanks thx put into about see
    where from used gave sent shared share showed mentioned references reference told paste copy scroll exactly
    actually vague need want part concrete spell out following short shorter went over head up
    """.split()
)
# What makes such a message "explain it differently": asking for another wording, more or less of it, an example, or
# saying it was not understood. Read before `_EN_AGAIN`: "explain that again, simpler" asks for a new explanation.
_EN_OTHERWISE = re.compile(
    r"\b(?:explain\w*|elaborat\w*|rephras\w*|reword\w*|clarif\w*|simplif\w*|expand|describe|eli5|differently|simpler"
    r"|simply|easier|clearer|deeper|further|details?|detailed|info|information|more|examples?"
    r"|(?:you|u|that|it|this) (?:actually |really |exactly )?(?:mean|means|meant)|meaning|wdym|huh"
    r"|confus\w*|unclear|not clear|vague|over my head|spell (?:it|that|this) out"
    r"|(?:another|different|other) (?:way|words)"
    r"|(?:plain|simple) (?:english|words|terms)|layman s? terms|step by step"
    r"|(?:break|dumb) (?:it |that |this )?down|walk me through|go on|makes? no sense"
    r"|(?:doesn t|doesnt|does not|didn t|didnt|did not) make (?:any )?sense"
    r"|(?:i m|im|i am|still) lost|lost me|too (?:technical|complicated)"
    r"|(?:don t|dont|do not|didn t|didnt|did not|not|never) (?:really |quite |fully |totally )?"
    r"(?:understand|understood|follow|get)"
    r")\b"
)
# Asking for the answer again as it was: again, repeat, once more, "didn't catch that", "the previous answer".
_EN_AGAIN = re.compile(
    r"\b(?:again|repeat\w*|resend|re send|one more time|once more|show|display|missed (?:it|that|this)"
    r"|(?:didn t|didnt|did not|couldn t|couldnt|could not) (?:catch|hear)"
    r"|what (?:did|do) (?:you|u) (?:just )?say|what (?:you|u) (?:just )?said"
    r"|(?:previous|last|earlier) (?:answer|reply|response|one|explanation)|paste|put (?:it|that|this) back"
    r"|(?:sources|links|references) (?:you|u) (?:gave|sent|showed|used|shared|mentioned)"
    r"|(?:what|where) (?:are|were) (?:the|those|your) (?:sources|links|references))\b"
)
# Words of any script, apostrophes splitting them as `_EN_WORD` does: a word in another script names something.
_ANY_WORD = re.compile(r"[^\W_]+")
# "One more time" is a request to repeat, though it says "more".
_EN_ONCE_MORE = re.compile(r"\b(?:one more time|once more)\b")
# A request about the answer is short: longer, a message asks something of its own.
MAX_REQUEST_WORDS = 14


def english_intent_by_rules(text: str) -> tuple[str, str] | None:
    """(built-in intent name, its built-in behaviour) when the whole of `text` is one of the chat formulas above of a
    built-in intent ("thx", "say again?", "eli5", "hello??") or a request about the last answer in words that name
    no topic ("can you explain that differently?": elaborate; "could you repeat what you just said?": repeat), else
    None. Apostrophes split words ("don't" is "don t"), so "dont" and "don't" read alike."""
    words = _EN_WORD.findall(text.lower())
    if not words:
        return None
    if len(words) <= MAX_RULE_WORDS:
        start = next((index for index, word in enumerate(words) if word not in _EN_FILLERS), len(words))
        for read in (words, words[start:]):
            ruled = _formula_intent(" ".join(read), _EN_RULES) if read else None
            if ruled is not None:
                return ruled
    return _request_about_answer(_ANY_WORD.findall(text.lower()))


def _request_about_answer(words: list[str]) -> tuple[str, str] | None:
    """(elaborate or repeat, its built-in behaviour) when every one of `words` talks about the conversation and one
    asks for the last answer explained otherwise (first) or shown again, else None."""
    if len(words) > MAX_REQUEST_WORDS or not _EN_ABOUT_ANSWER.issuperset(words):
        return None
    joined = " ".join(words)
    if _EN_OTHERWISE.search(_EN_ONCE_MORE.sub(" ", joined)):
        return "elaborate", BUILTIN_INTENTS["elaborate"]["behaviour"]
    if _EN_AGAIN.search(joined):
        return "repeat", BUILTIN_INTENTS["repeat"]["behaviour"]
    return None


def intent_by_rules(text: str) -> tuple[str, str] | None:
    """(built-in intent name, its built-in behaviour) when the whole of `text` is one of the Chinese formulas of the
    built-in intents, else None. Only the built-in names (BUILTIN_INTENTS) come out."""
    compact = _NOT_READ.sub("", simplified(text.lower()))
    if not compact or len(compact) > MAX_RULE_CHARS:
        return None
    return _formula_intent(compact, _RULES)


def _formula_intent(compact: str, rules: tuple[tuple[str, re.Pattern[str]], ...]) -> tuple[str, str] | None:
    """(name, built-in behaviour) of the first of `rules` that matches the whole of `compact`, else None."""
    for name, rule in rules:
        if rule.fullmatch(compact):
            return name, BUILTIN_INTENTS[name]["behaviour"]
    return None
