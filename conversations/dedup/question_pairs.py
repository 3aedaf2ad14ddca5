"""What two questions say beyond their vectors' cosine: their words, numbers and negations, whether they conflict, and
whether one depends on its context. Pure functions, no I/O: `decisions.duplicate_decide` runs them on every candidate,
and the duplicate head's features (`pair_features`) read questions through them.

What these rules read of one text (its words, numbers, negation, the opposite actions, periods and owners it names) is
kept per text (`_TEXTS_KEPT`, least recently used first out) and returned immutable: a turn checks its question
against each candidate, the conflict rules and the head's features read the same text again, and stored questions
come back turn after turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType

from conversations.dedup import chinese_text, kinds, other_languages

# Texts whose readings are kept, per reading: a turn's question and candidates, and the recent turns' (the extractive
# answer reads its passages' sentences through `content_words` too).
_TEXTS_KEPT = 1 << 12

# Letters and digits of any script ("contraseña", "zurück", "пароль" are one word each), and an elision or contraction
# of letters after an apostrophe ("don't", "n'est"); on ASCII text exactly `[a-z0-9]+(?:'[a-z]+)?`.
_WORD = re.compile(r"[^\W_]+(?:'[^\W\d_]+)?")
# A quantity: digits (with thousands or decimal separators) that stand alone or carry a unit or ordinal suffix
# ("5GB", "24h", "3rd"). Digits glued to other letters name a thing, not a quantity ("2FA", "mp3", "h264", "v2",
# "iPhone6"): they are words, so "turn on 2FA" and "enable 2FA" do not differ on numbers.
_NUMBER = re.compile(r"(?<![A-Za-z0-9.,])(\d+(?:[.,]\d+)*)([A-Za-z]*)")
# A clock time ("9:00", "09:00", "10:30pm", "17：00", "6 : 30"): read as the hour with its minutes as decimals, so
# "9:00" names what "9" and "9am" do and "10:30" what "10.30" does. Two-digit minutes only, so a ratio ("16:9") is
# left alone, and one with seconds ("12:30:45").
_CLOCK = re.compile(r"(?<![\d:：.,])(\d{1,2}) ?[:：] ?([0-5]\d)(?![\d:：])")
# A whole amount written with cents ("$9.00"): the same quantity as "9". Only ".00": "3.10" and "3.1" may be two
# versions, and "1.000" a thousand where a dot groups thousands.
_WHOLE_CENTS = re.compile(r"^(\d+)\.00$")
_NUMBER_SUFFIXES = frozenset(
    """st nd rd th s k m bn mm cm km kg g lb lbs mg ml kb mb gb tb pb hz khz mhz ghz ms sec secs min mins h hr hrs
    am pm x px pt""".split()
)
# Words that say no. Every "n't" word does too (read by its ending); these hold the same contractions as users often
# type them, without the apostrophe ("I cant log in", "why didnt I get a refund"): unread, "didnt" passes for "did".
_NEGATIONS = frozenset(
    """not no never without nor cannot none nothing unable cant dont doesnt didnt isnt arent wasnt werent wont
    wouldnt couldnt shouldnt havent hasnt hadnt mustnt neednt aint""".split()
)
STOPWORDS = frozenset(
    """a an the and or but if then than so to of in on at by for with from into onto about as is are was were be been
    being am do does did doing done have has had having i me my mine we us our you your yours he him his she her hers
    it its they them their theirs this that these those there here what which who whom whose when where why how can
    could would should will shall may might must just also very really any some all each every more most much many
    such own same other others only even ever get got getting one ones s t don doesn didn isn aren wasn weren haven
    hasn hadn won wouldn shouldn couldn ll ve re d m o y best good way ways make makes thing things someone something
    anyone anything people person use used using""".split()
)
# Words that point back at an earlier turn: a question built on them means something only with its context.
_ANAPHORA = frozenset(
    """it its it's this that these those they them their theirs he him his she her hers there then such same one ones
    former latter above previous aforementioned""".split()
)
_FOLLOWUP_OPENERS = (
    "and ",
    "what about",
    "how about",
    "what abt",
    "wat about",
    "wat abt",
    "how abt",
    "what bout",
    "how bout",
    "what if",
    "also",
    "but ",
    "so ",
    "then ",
    "or ",
    "same ",
    "why not",
    "is that",
    "does that",
    "do they",
    "are they",
    "is it",
    "does it",
    "can it",
    "can they",
)
FOLLOWUP_MAX_CONTENT_WORDS = 1
# An English contraction's tail ("what's", "I'm", "they're"; not "n't", which says no) and the possessive 's: the word
# is read as its first part, so "what's the price?" names one thing as "what is the price?" does.
_CONTRACTION_TAIL = re.compile(r"'(?:s|m|re|ve|ll|d)$")
# Function words as users type them in chat, without the apostrophe or shortened, read as the word they stand for.
_CHAT_SPELLINGS = {
    "whats": "what",
    "wheres": "where",
    "hows": "how",
    "whos": "who",
    "thats": "that",
    "theres": "there",
    "heres": "here",
    "im": "i",
    "ive": "i",
    "youre": "you",
    "theyre": "they",
    "u": "you",
    "ur": "your",
    "pls": "please",
    "plz": "please",
}


def _letter_words(text: str) -> list[str]:
    """The words of text without Chinese characters: `_WORD`'s, Japanese ones cut where the script changes
    (`other_languages.kana_words_cut`)."""
    words = _WORD.findall(text)
    return other_languages.kana_words_cut(words) if other_languages.has_kana(text) else words


@lru_cache(maxsize=_TEXTS_KEPT)
def words_read(text: str) -> tuple[str, ...]:
    """A question's words as these rules read them: lowercased runs of Latin letters and digits, and in Chinese text
    the words of its Chinese runs as the segmenter cuts them (`chinese_text`). Kept per text and immutable, as the
    rules and the head's features (`pair_features`) read one text many times."""
    if not chinese_text.reads_as_chinese(text):
        return tuple(_letter_words(text.lower().replace("\u2019", "'")))
    lowered = chinese_text.normalized(text).lower().replace("\u2019", "'")
    return tuple(chinese_text.words_of(lowered, _letter_words))


def question_words(text: str) -> list[str]:
    """`words_read` as a list of the caller's own."""
    return list(words_read(text))


@lru_cache(maxsize=1 << 16)
def word_stem(word: str) -> str:
    """A light suffix strip, enough to match plural/verb forms ("prices" ~ "price", "running" ~ "run")."""
    for suffix in ("ies", "ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _word_read(word: str) -> str:
    """The word an English word of a question is read as: its contraction's first part ("what's" is "what") and
    its chat spelling's word ("whats" is "what", "u" is "you"); any other word as it is."""
    word = _CONTRACTION_TAIL.sub("", word) if "'" in word else word
    return _CHAT_SPELLINGS.get(word, word)


@lru_cache(maxsize=1 << 16)
def _content_stem(word: str) -> str:
    """The stem a word counts as in `content_words`, or "" for a word that counts as none (a stopword, a negation, a
    number)."""
    if (
        word in STOPWORDS
        or word in _NEGATIONS
        or word in other_languages.NEGATIONS
        or word in other_languages.FUNCTION_WORDS
        or word.isdigit()
    ):
        return ""
    if word in chinese_text.STOPWORDS or word in chinese_text.NEGATIONS or chinese_text.is_numeral_word(word):
        return ""
    return word_stem(word)


@lru_cache(maxsize=_TEXTS_KEPT)
def content_words(text: str) -> frozenset[str]:
    """The stems of the words of `text` that carry its content: not stopwords, negations or numbers. Words are taken
    as written ("what's" counts, as "what'"): the duplicate heads' lexical features were fitted on this reading."""
    return frozenset(map(_content_stem, words_read(text))) - {""}


def _words_named(words: Sequence[str]) -> set[str]:
    """What the follow-up guard counts as the things a question names: the content stems of its words read through
    contractions and chat spellings (`_word_read`), so "what's the price?" and "whats the price" name one thing, as
    "what is the price?" does."""
    stems = {_content_stem(_word_read(word)) for word in words}
    stems.discard("")
    return stems


# English cardinal numbers as words, read by value ("two accounts" is "2 accounts"; "twenty-five", "two hundred and
# fifty"). Not "one", which is as often a pronoun or "a" ("which one", "one of my invoices", "create one"), as Chinese
# 一 is no number to these rules either; nor "zero", as often "from scratch" ("learn math from zero").
_EN_UNITS = {
    word: value
    for value, word in enumerate(
        """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
        seventeen eighteen nineteen""".split()
    )
    if value >= 2
}
_EN_TENS = {
    word: 10 * (i + 2) for i, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())
}
# Counts that are part of a name, as the "2" of "2FA" is: "two-factor" / "2-step" verification is one thing, not two.
_NAMED_COUNTS = re.compile(r"\b(?:two|2)[- ]?(?:factor|step)\b", re.IGNORECASE)
_EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}


def _english_number_words(words: Sequence[str]) -> set[str]:
    """The values of the runs of English number words in `words` ("twenty five" 25, "two hundred and fifty" 250, "a
    thousand" 1000), as strings. A scale word after digits ("2 million") is left to the digits."""
    values: set[str] = set()
    total = current = 0
    in_run = False
    previous = ""
    for word in (*words, ""):
        if in_run and (
            (previous in _EN_UNITS and (word in _EN_UNITS or word in _EN_TENS or word == "one"))
            or (previous in _EN_TENS and (word in _EN_TENS or _EN_UNITS.get(word, 0) >= 10))
        ):
            # A unit, or a ten before a ten or a teen, ends a number: "two one-way tickets" is 2 (and "one" no
            # number), not 3; "twenty thirty" is 20 and 30.
            values.add(str(total + current))
            total = current = 0
            in_run = False
        if word in _EN_UNITS or word in _EN_TENS or (word == "one" and in_run):
            # "one" only inside a run: "twenty-one", "a hundred and one"
            current += _EN_UNITS.get(word, 0) + _EN_TENS.get(word, 0) + (word == "one")
            in_run = True
        elif word in _EN_SCALES and (in_run or not previous.isdigit()):
            if word == "hundred":
                current = max(current, 1) * 100
            else:
                total += max(current, 1) * _EN_SCALES[word]
                current = 0
            in_run = True
        elif word == "and" and previous in _EN_SCALES:
            pass  # "two hundred and fifty": the run goes on
        else:
            if in_run:
                values.add(str(total + current))
            total = current = 0
            in_run = False
        previous = word
    return values


@lru_cache(maxsize=_TEXTS_KEPT)
def numbers_in(text: str) -> frozenset[str]:
    """The quantities a question names ("2,016" and "2016" are one, "9:00", "9.00" and "9" too, "10:30" and "10.30"),
    leaving out digits that are part of a word; in Chinese text also those written in Chinese numerals, by value ("三"
    is "3", "5万" and "五万" are "50000": `chinese_text.chinese_quantities`)."""
    quantities: set[str] = set()
    if chinese_text.reads_as_chinese(text):
        quantities, text = chinese_text.chinese_quantities(chinese_text.normalized(text))
    text = _NAMED_COUNTS.sub(" ", text)
    words = _letter_words(text.lower().replace("\u2019", "'"))
    quantities |= _english_number_words(words) | other_languages.number_words(words, text)
    text = _CLOCK.sub(lambda m: str(int(m[1])) if m[2] == "00" else f"{int(m[1])}.{m[2]}", text)
    return frozenset(quantities) | {
        _WHOLE_CENTS.sub(r"\1", number.replace(",", ""))
        for number, suffix in _NUMBER.findall(text)
        if not suffix or suffix.lower() in _NUMBER_SUFFIXES
    }


def _read_as_chinese(text: str) -> bool:
    """Whether the Chinese rules read `text`: it has Chinese characters and is not Japanese, whose kanji do not deny
    or name actions as the same characters do in Chinese (不具合 is "a fault", 別 "another", 無料 "free")."""
    return chinese_text.reads_as_chinese(text) and not other_languages.reads_as_japanese(text)


# Portuguese writes "no" for "in the" ("Vocês abrem no sábado?"; its "not" is "não"): words no English or Spanish
# text uses, one of which says "no" is that contraction when no English function word stands beside it.
_PORTUGUESE_SIGNS = frozenset(
    """você vocês é são também posso pode podem meu minha meus minhas seu sua ao aos às pelo pela num numa isso essa
    esse muito até depois ainda tenho tem quero preciso estou vou então agora""".split()
)


def _says_no(word: str, words: Sequence[str]) -> bool:
    if word == "no":
        return not (_PORTUGUESE_SIGNS.intersection(words) and not other_languages.reads_as_english(words))
    return word in _NEGATIONS or word.endswith("n't")


@lru_cache(maxsize=_TEXTS_KEPT)
def is_negated(text: str) -> bool:
    """Whether `text` says no: English "not" and its kin (not Portuguese "no", "in the"), the word that says it in the
    other languages (`other_languages`), Japanese, Korean and Thai negation written inside words, and Chinese
    negation, which is not read in Japanese text (its kanji do not deny as the same characters do in Chinese: 不具合 is
    "a fault", 別 "another", 無料 "free")."""
    words = words_read(text)
    chinese = _read_as_chinese(text)
    return (
        any(_says_no(w, words) for w in words)
        or other_languages.negated(words)
        or other_languages.negated_in_text(text, words)
        or (chinese and chinese_text.negated(text))
    )


# English actions and their opposites, and the ends of a scale ("best" / "worst", "more" / "less"), each side in the
# forms a question writes it. One question asking about one side and the other about the other is two questions
# however close their vectors ("What time does the store open on Sunday?" / "... close on Sunday?", cosine 0.93). Left
# out: pairs whose opposites often ask one thing, which QQP's labelled duplicates showed: "before" and "after" two
# different events or dates (`before_after_differ` reads them around the same one), a war "won" or "lost" in a
# counterfactual, "good" / "bad", and "to" / "from" before different things (`to_from_differ` reads them before the
# same one).
_OPPOSITES = tuple(
    (frozenset(one.split(", ")), frozenset(other.split(", ")))
    for one, other in (
        ("open, opens, opened, opening", "close, closes, closed, closing"),
        ("lock, locks, locked, locking", "unlock, unlocks, unlocked, unlocking"),
        ("enable, enables, enabled, enabling", "disable, disables, disabled, disabling"),
        ("activate, activates, activated, activating", "deactivate, deactivates, deactivated, deactivating"),
        ("connect, connects, connected, connecting", "disconnect, disconnects, disconnected, disconnecting"),
        ("subscribe, subscribes, subscribed, subscribing", "unsubscribe, unsubscribes, unsubscribed, unsubscribing"),
        ("install, installs, installed, installing", "uninstall, uninstalls, uninstalled, uninstalling"),
        ("add, adds, added, adding", "remove, removes, removed, removing, delete, deletes, deleted, deleting"),
        ("upload, uploads, uploaded, uploading", "download, downloads, downloaded, downloading"),
        ("import, imports, imported, importing", "export, exports, exported, exporting"),
        ("increase, increases, increased, increasing", "decrease, decreases, decreased, decreasing, reduce, reduced"),
        ("upgrade, upgrades, upgraded, upgrading", "downgrade, downgrades, downgraded, downgrading"),
        ("buy, buys, bought, buying", "sell, sells, sold, selling"),
        ("send, sends, sent, sending", "receive, receives, received, receiving"),
        ("start, starts, started, starting", "stop, stops, stopped, stopping"),
        ("show, shows, showed, shown, showing", "hide, hides, hid, hidden, hiding"),
        ("encrypt, encrypts, encrypted, encrypting", "decrypt, decrypts, decrypted, decrypting"),
        ("accept, accepts, accepted, accepting", "reject, rejects, rejected, rejecting"),
        ("join, joins, joined, joining", "leave, leaves, left, leaving"),
        ("lend, lends, lent, lending", "borrow, borrows, borrowed, borrowing"),
        ("mute, mutes, muted, muting", "unmute, unmutes, unmuted, unmuting"),
        ("follow, follows, followed, following", "unfollow, unfollows, unfollowed, unfollowing"),
        ("block, blocks, blocked, blocking", "unblock, unblocks, unblocked, unblocking"),
        ("minimum, min", "maximum, max"),
        ("earliest", "latest"),
        ("first", "last"),
        ("best", "worst"),
        ("highest", "lowest"),
        ("longest", "shortest"),
        ("biggest, largest", "smallest"),
        ("fastest, quickest", "slowest"),
        ("easiest", "hardest"),
        ("cheapest", "most expensive"),
        ("more", "less, fewer"),
        ("advantage, advantages", "disadvantage, disadvantages"),
        ("positive", "negative"),
        ("input, inputs", "output, outputs"),
        ("into", "out of"),
        ("incoming", "outgoing"),
        ("inbound", "outbound"),
        ("deposit, deposits, deposited, depositing", "withdraw, withdraws, withdrew, withdrawing, withdrawal"),
        ("arrive, arrives, arrived, arriving, arrival", "depart, departs, departed, departing, departure"),
        ("login, logins, log in, logging in, logged in", "logout, logouts, log out, logging out, logged out"),
        ("sign in, signing in, signed in", "sign out, signing out, signed out"),
        ("turn on, turning on, turned on", "turn off, turning off, turned off"),
        ("switch on, switching on, switched on", "switch off, switching off, switched off"),
        ("opt in, opting in, opted in", "opt out, opting out, opted out"),
        ("public", "private"),
        ("online", "offline, in store, instore"),
        ("weekday, weekdays", "weekend, weekends"),
        ("one way", "round trip, return trip, return ticket"),
        ("standard shipping, standard delivery, regular shipping, regular delivery, economy shipping", "express"),
        ("new", "existing"),
        ("domestic, local", "international"),
        ("within", "after"),
        ("under", "over"),
        ("above", "below"),
        ("include, includes, included, including", "exclude, excludes, excluded, excluding"),
        ("buyer, buyers", "seller, sellers"),
        ("sender, senders", "recipient, recipients, receiver, receivers"),
        (
            "allow, allows, allowed, allowing",
            "block, blocks, blocked, blocking, prevent, prevents, prevented, preventing",
        ),
        ("internal", "external"),
        (
            "scroll up, scrolling up, swipe up, swiping up, volume up, turn up, go up, goes up, going up, went up, "
            "move up",
            "scroll down, scrolling down, swipe down, swiping down, volume down, turn down, go down, goes down, "
            "going down, went down, move down",
        ),
        ("zoom in, zooming in, zoomed in", "zoom out, zooming out, zoomed out"),
        ("upstairs", "downstairs"),
        ("free", "paid"),
        (
            "check in, checks in, checked in, checking in, check ins, checkin, checkins",
            "check out, checks out, checked out, checking out, check outs, checkout, checkouts",
        ),
        ("merge, merges, merged, merging", "split, splits, splitting, unmerge, unmerges, unmerged"),
        # Not "paused": "restart my paused membership" resumes it.
        ("pause, pauses, pausing", "resume, resumes, resumed, resuming, unpause, unpauses, unpaused"),
        (
            "approve, approves, approved, approving, approval, approvals",
            "reject, rejects, rejected, rejecting, rejection, decline, declines, declined, declining, deny, denies, "
            "denied, denying",
        ),
        ("extend, extends, extended, extending", "shorten, shortens, shortened, shortening"),
        ("update, updates, updated, updating", "roll back, rolls back, rolled back, rolling back, rollback, rollbacks"),
        ("early, earlier", "late, later"),
        ("upper", "lower"),
        (
            "pick up, picks up, picked up, picking up, pickup, pickups, collect, collects, collected, collecting, "
            "collection",
            "drop off, drops off, dropped off, dropping off, dropoff, return, returns, returned, returning",
        ),
        ("top", "bottom"),
        ("left", "right"),
        ("dark mode, dark theme", "light mode, light theme"),
        ("horizontal, horizontally", "vertical, vertically"),
        ("landscape", "portrait"),
        ("wired, corded", "wireless, cordless"),
        ("hot", "cold"),
        (
            "rent, rents, rented, renting, rental, rentals, lease, leases, leasing",
            "buy, buys, bought, buying, purchase, purchases, purchased, purchasing",
        ),
        (
            "primary, main cardholder, main card",
            "secondary, additional cardholder, additional card, supplementary card",
        ),
        ("wholesale", "retail"),
        ("single room, single rooms", "double room, double rooms, twin room, twin rooms"),
        ("undo, undoes, undid, undone, undoing", "redo, redoes, redid, redone, redoing"),
        # Not "faster" / "slower": "How can I make my laptop faster?" asks what "Why is it getting slower?" asks.
        ("speed up, speeds up, speeding up, sped up", "slow down, slows down, slowing down, slowed down"),
        ("coming in, income", "going out, expense, expenses"),
        (
            "sign up, signs up, signing up, signed up, signup, register, registers, registering, registration",
            "sign in, signs in, signing in, signed in, signin, log in, logs in, logging in, logged in, login",
        ),
        ("inside, indoor, indoors", "outside, outdoor, outdoors"),
        ("start, starts, started, starting, begin, begins, began, beginning", "end, ends, ended, ending"),
        ("full refund, full refunds, fully refunded", "partial refund, partial refunds, partially refunded"),
        (
            "front camera, front cameras, selfie camera, selfie cameras",
            "back camera, back cameras, rear camera, rear cameras",
        ),
    )
)


def _forms_of_sides(
    opposites: Sequence[tuple[frozenset[str], frozenset[str]]],
) -> dict[str, tuple[tuple[int, int], ...]]:
    """Each form of `opposites` with the sides it names: (entry, 0) for an action, (entry, 1) for its opposite."""
    sides: dict[str, tuple[tuple[int, int], ...]] = {}
    for entry, pair in enumerate(opposites):
        for side, forms in enumerate(pair):
            for form in forms:
                sides[form] = (*sides.get(form, ()), (entry, side))
    return sides


_OPPOSITE_FORMS = _forms_of_sides(_OPPOSITES)


def _terms(text: str) -> set[str]:
    """A question's words, contractions and chat spellings read, and each two words in a row ("log in")."""
    words = [_word_read(word) for word in words_read(text)]
    return set(words) | {f"{one} {two}" for one, two in zip(words, words[1:], strict=False)}


@lru_cache(maxsize=_TEXTS_KEPT)
def _opposite_sides(text: str) -> tuple[frozenset[int], frozenset[int]]:
    """The entries of `_OPPOSITES` whose action `text` names without its opposite, and those whose opposite it names
    without the action (an entry whose both sides it names is in neither)."""
    named: tuple[set[int], set[int]] = (set(), set())
    for term in _terms(text):
        for entry, side in _OPPOSITE_FORMS.get(term, ()):
            named[side].add(entry)
    return frozenset(named[0] - named[1]), frozenset(named[1] - named[0])


@lru_cache(maxsize=_TEXTS_KEPT)
def _direction(text: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """Where a question moves something, from and to, as the content stems of each end ("switch from a personal
    account to a business one": ({personal, account}, {business, one})); in either order ("to X from Y"). None when
    it names no "from" with a "to"."""
    words = words_read(text)
    if "from" not in words or "to" not in words:
        return None
    start, end = words.index("from"), words.index("to")
    first, last = sorted((start, end))
    inner = frozenset(filter(None, map(_content_stem, words[first + 1 : last])))
    outer = frozenset(filter(None, map(_content_stem, words[last + 1 :])))
    return (inner, outer) if start < end else (outer, inner)


def direction_reversed(first: str, second: str) -> bool:
    """Whether the two questions move something between the same two ends, each the other way round: "switch from a
    personal account to a business account" / "... from a business account to a personal account", the same words in
    another order, which the embedding cannot tell apart (cosine 0.997)."""
    one, other = _direction(first), _direction(second)
    if one is None or other is None or one[0] == one[1]:
        return False
    return one[0] == other[1] and one[1] == other[0] and bool(one[0] ^ one[1])


# The words that put a question on one side of a thing, by kind, each with its side: before or after an event
# ("prior to" as "before"), and a move to or from a place or holder.
_SIDE_WORDS = {
    "time": {"before": 0, "prior": 0, "after": 1},
    "move": {"to": 0, "into": 0, "onto": 0, "from": 1},
}
# Words after which "from" says how things differ, not where a move starts ("different from" is "different to").
_FROM_NOT_A_MOVE = frozenset({"different", "differ", "differs", "differently", "apart"})


def _same_event(one: str, other: str) -> bool:
    """Whether two content stems name one event in another form: equal, or one the start of the other and at least
    three letters long ("ship" / "shipp" of "ships" / "shipping", "pay" / "payment")."""
    if one == other or one.isdigit() or other.isdigit():
        return one == other
    short, long = sorted((one, other), key=len)
    return len(short) >= 3 and long.startswith(short)


@lru_cache(maxsize=_TEXTS_KEPT)
def _sides(text: str, kind: str) -> tuple[tuple[int, str], ...]:
    """Each side an English question puts a thing on (`_SIDE_WORDS[kind]`: 0 before or to, 1 after or from), with
    the thing: the first content word after the side's word, as its stem, or a number ("before it ships": (0,
    "ship"); "after 1947": (1, "1947"); "to another bank": (0, "another")). A side with neither after it (a pronoun
    alone) is left out; "to" before a verb is read as a side too, which no question has "from" before."""
    words = words_read(text)
    side_words = _SIDE_WORDS[kind]
    sides = []
    for index, word in enumerate(words):
        side = side_words.get(word)
        if side is None or (word == "from" and index and words[index - 1] in _FROM_NOT_A_MOVE):
            continue
        thing = next(
            (
                stem
                for later in words[index + 1 :]
                if later not in side_words and (stem := later if later.isdigit() else _content_stem(later))
            ),
            "",
        )
        if thing:
            sides.append((side, thing))
    return tuple(sides)


def _sides_differ(one: Sequence[tuple[int, str]], other: Sequence[tuple[int, str]]) -> bool:
    """Whether a thing is on one side in `one` and on the other side in `other`, neither question also putting it on
    the side the other does."""

    def puts(sides: Sequence[tuple[int, str]], side: int, thing: str) -> bool:
        return any(named == side and _same_event(named_thing, thing) for named, named_thing in sides)

    return any(
        puts(other, 1 - side, thing) and not puts(one, 1 - side, thing) and not puts(other, side, thing)
        for side, thing in one
    )


def before_after_differ(first: str, second: str) -> bool:
    """Whether one English question asks before an event and the other after the same event, neither asking both
    ("Can I get a refund before shipping?" / "... after shipping?", cosine 0.95: the same words but one; 发货前 /
    发货后 in Chinese is `chinese_text.opposites_differ`'s). Around different events the two words often ask one
    question (QQP's "days before my period" / "just after it ends" is a labelled duplicate), so only the same event
    or date counts. The words of the multilingual model's other languages are read by `other_languages.time_sides`."""
    if _read_as_chinese(first) or _read_as_chinese(second):
        return False
    return _sides_differ(
        _sides(first, "time") + other_languages.time_sides(words_read(first)),
        _sides(second, "time") + other_languages.time_sides(words_read(second)),
    )


def to_from_differ(first: str, second: str) -> bool:
    """Whether one English question moves something to a thing and the other from the same thing, neither naming
    both ("How do I transfer money to another bank?" / "... from another bank?", cosine near 1). QQP's duplicates
    put "to" and "from" before different things ("to get into the IIMs" / "a call from the IIMs" is the one labelled
    duplicate this reads as two questions), so only the same thing counts. Two questions of the same words in another
    order are the swap rules' to read (`direction_reversed`, `words_swapped`), with their exceptions."""
    if sorted(words_read(first)) == sorted(words_read(second)):
        return False
    return _sides_differ(_sides(first, "move"), _sides(second, "move"))


# The word a comparison puts before the thing compared against: English "than", and Chinese 比 where the segmenter
# cuts it alone ("A比B便宜吗"; not inside 比较 "rather" or 比如 "for example", which are words of their own).
_COMPARED_AGAINST = frozenset({"than", "比"})


@lru_cache(maxsize=_TEXTS_KEPT)
def _comparison(text: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]] | None:
    """(the content stems before the comparison word, the thing compared against, every content stem) of a question
    that compares once ("Is the Pro plan cheaper than the Team plan?": the thing is {team, plan}, the first content
    words after "than" in a row; in Chinese the first content word after 比). None for a question comparing nothing
    or more than once."""
    words = words_read(text)
    at = [i for i, word in enumerate(words) if word in _COMPARED_AGAINST]
    if len(at) != 1:
        return None
    chinese = chinese_text.reads_as_chinese(text)
    thing: list[str] = []
    for word in words[at[0] + 1 :]:
        stem = _content_stem(word)
        if not stem and thing:
            break
        if stem:  # the words before the thing ("than the Team plan") are passed over
            thing.append(stem)
            if chinese:
                break
    before = frozenset(filter(None, map(_content_stem, words[: at[0]])))
    return before, frozenset(thing), frozenset(filter(None, map(_content_stem, words)))


def comparison_reversed(first: str, second: str) -> bool:
    """Whether the two questions compare the same two things, each the other way round, in the same words: "Is the
    Pro plan cheaper than the Team plan?" / "Is the Team plan cheaper than the Pro plan?", "苹果比香蕉贵吗" /
    "香蕉比苹果贵吗", which the embedding cannot tell apart, and whose answers are each other's opposite."""
    one, other = _comparison(first), _comparison(second)
    if one is None or other is None:
        return False
    (before, thing, words), (other_before, other_thing, other_words) = one, other
    return (
        bool(thing)
        and bool(other_thing)
        and thing != other_thing
        and words == other_words
        and thing <= other_before
        and other_thing <= before
    )


# Prefixes that make a word its opposite or undo it: "hide" / "unhide", "visible" / "invisible", "approve" /
# "disapprove", "select" / "deselect".
_OPPOSING_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "de", "non")
# Words that are each other's opposite when they are all two questions differ in ("move a card up in the list" /
# "... down ..."), though not wherever they stand ("break up" / "break down" was one question in QQP).
_ONE_WORD_OPPOSITES = frozenset({frozenset({"up", "down"})})


# Prefixes written apart from their word ("non-refundable" is read "non", "refundable"), each with the words it may
# lead (None: any). "Off" only before "peak": elsewhere it is the "off" of "turn off", no prefix.
_PREFIX_WORDS_APART: dict[str, frozenset[str] | None] = {"non": None, "off": frozenset({"peak"})}


def prefixed_apart(first: str, second: str) -> bool:
    """Whether one question is the other with a prefix written apart before one of its words, and nothing else
    changed: "Is the deposit refundable?" / "Is the deposit non-refundable?", "peak rates" / "off-peak rates" (cosine
    0.96-0.98 in the bundled model, which served them). A word and its prefixed form name opposite things; only the
    whole question, word for word, is read, so "non" as a word of its own elsewhere changes nothing."""
    one, other = words_read(first), words_read(second)
    if len(one) == len(other):
        return False
    shorter, longer = sorted((one, other), key=len)
    if len(longer) != len(shorter) + 1:
        return False
    for index, word in enumerate(longer[:-1]):
        if word in _PREFIX_WORDS_APART and longer[:index] + longer[index + 1 :] == shorter:
            leads = _PREFIX_WORDS_APART[word]
            return leads is None or longer[index + 1] in leads
    return False


def one_word_opposite(first: str, second: str) -> bool:
    """Whether the two questions differ in one content word only, one side's word the other's with an opposing prefix
    (`_OPPOSING_PREFIXES`) or its opposite in `_ONE_WORD_OPPOSITES`: "How do I hide a post?" / "How do I unhide a
    post?", "Is the feature available on Android?" / "... unavailable ...", cosine 0.85-0.94 and served before. Two
    questions one content word apart ask two things unless the two words are synonyms, which a word and its prefixed
    form seldom are; the prefix is why the embedding puts them together. Not a word the other question writes as two
    ("infront" / "in front")."""
    one, other = content_words(first), content_words(second)
    only_one, only_other = one - other, other - one
    if len(only_one) != 1 or len(only_other) != 1:
        return False
    if only_one | only_other in _ONE_WORD_OPPOSITES:
        return True
    shorter, longer = sorted((next(iter(only_one)), next(iter(only_other))), key=len)
    prefix = longer[: len(longer) - len(shorter)]
    if len(shorter) < 3 or prefix not in _OPPOSING_PREFIXES or not longer.endswith(shorter):
        return False
    written_apart = f" {prefix} {shorter} "
    return not any(written_apart in f" {' '.join(words_read(text))} " for text in (first, second))


# An English word with its possessive ending kept: "admin's", "admins'" (`_WORD` drops a final apostrophe).
_POSSESSIVE_WORD = re.compile(r"[a-z0-9]+(?:'s\b|(?<=s)'(?![a-z]))?")
# Words with which the asker names themself or what is theirs. "You" / "your" count as the asker: help-centre
# questions ask "How do you change your password?" for "How do I change my password?".
_ASKER_OWNS = frozenset({"my", "our", "your", "ur"})
_ASKER = _ASKER_OWNS | frozenset({"i", "me", "we", "us", "you", "u", "mine", "ours", "yours", "myself", "yourself"})
# Words between an owner and what it owns that are not the thing owned ("my own account", "the admin's new post").
_OWNED_SKIPPED = frozenset({"own", "new", "old", "current", "other", "first", "last", "main", "whole", "entire"})
# A word ending in 's that owns nothing: a contraction ("it's", "what's") or a fixed phrase of time or generality.
_NOT_OWNERS = frozenset(
    "it's that's what's who's where's there's here's he's she's let's how's when's why's one's else's "
    "today's tomorrow's yesterday's year's world's".split()
)
_ASKER_MARK = "\x00asker"
# The asker in Chinese, as the segmenter cuts it; 的 joins an owner to what it owns ("我的消息", "管理员的消息").
_ZH_ASKER = frozenset("我 我们 你 你们 您 咱 咱们".split())


# The asker as the one who acts ("Can I reset ...", "How do we add ..."): not "my", which owns.
_ASKER_ACTS = frozenset({"i", "we"})
# What may stand between the party and its verb: "Is the admin able to reset my password?".
_ABLE_TO = frozenset({("able", "to"), ("allowed", "to"), ("permitted", "to"), ("going", "to")})
# The longest party `_party_swapped` reads before the thing: "the admin", "the team lead", "the front desk staff".
_PARTY_MAX_WORDS = 3


@lru_cache(maxsize=_TEXTS_KEPT)
def _plain_words(text: str) -> tuple[str, ...]:
    """The words of an English question as `_owners` reads them, lowercased, possessive endings kept."""
    return tuple(_POSSESSIVE_WORD.findall(text.lower().replace("\u2019", "'")))


def _without_possessive(word: str) -> str:
    return word.removesuffix("'s").removesuffix("'")


@lru_cache(maxsize=_TEXTS_KEPT)
def _owners(text: str) -> tuple[Mapping[str, frozenset[str]], frozenset[str]]:
    """(what a question says is whose: the stem of each thing owned -> the stems of its owners, the asker written
    `_ASKER_MARK`; everyone the question names at all, the asker included). "Can admins see my messages?":
    ({messag: {asker}}, {admin, see, messag, asker, ...}). Generic owners (his, their, its) are not read: QQP writes
    "their" for the asker as often as for another. Chinese: `_owners_chinese`."""
    if _read_as_chinese(text):
        return _owners_chinese(words_read(text))
    words = _plain_words(text)
    owned: dict[str, set[str]] = {}
    for index, word in enumerate(words[:-1]):
        if word in _ASKER_OWNS:
            owner = _ASKER_MARK
        elif word.endswith(("'s", "s'")) and word not in _NOT_OWNERS:
            owner = word_stem(_without_possessive(word))
        else:
            continue
        at = index + 1
        while at < len(words) - 1 and words[at] in _OWNED_SKIPPED:
            at += 1
        thing = _content_stem(_without_possessive(words[at]))
        if thing:
            owned.setdefault(thing, set()).add(owner)
    named = {_ASKER_MARK if word in _ASKER else word_stem(_without_possessive(word)) for word in words}
    return MappingProxyType({thing: frozenset(owners) for thing, owners in owned.items()}), frozenset(named)


def _owners_chinese(words: Sequence[str]) -> tuple[Mapping[str, frozenset[str]], frozenset[str]]:
    """`_owners` of a Chinese question cut into `words`: the word before 的 owns the word after it ("管理员的消息")."""
    owned: dict[str, set[str]] = {}
    for index in range(1, len(words) - 1):
        if words[index] != "的":
            continue
        before, thing = words[index - 1], _content_stem(words[index + 1])
        owner = _ASKER_MARK if before in _ZH_ASKER else _content_stem(before)
        if owner and thing:
            owned.setdefault(thing, set()).add(owner)
    # The segmenter now and then keeps "I" with the word after it ("我会"): a word opening with 我 names the asker.
    named = {_ASKER_MARK if word in _ZH_ASKER or word.startswith("我") else word for word in words}
    return MappingProxyType({thing: frozenset(owners) for thing, owners in owned.items()}), frozenset(named)


def _party_swapped(first: str, second: str) -> bool:
    """Whether in `first` another party does something to the asker's thing and in `second` the asker does the same
    to the thing with that party written before it, no possessive ending: "Can the admin reset my password?" / "How
    do I reset the admin password?", "Can the team lead edit my calendar?" / "Can I edit the team lead calendar?".
    The party is what stands between "the" and the verb the asker does in `second`; that same verb is what tells a
    party from a word that only describes ("Can the shared folder hold my files?" / "Can I see the shared files?")."""
    words, other = _plain_words(first), _plain_words(second)
    owned, _ = _owners(first)
    askers_things = {thing for thing, owners in owned.items() if _ASKER_MARK in owners}
    if not askers_things:
        return False
    actions = {word_stem(other[i + 1]) for i in range(len(other) - 1) if other[i] in _ASKER_ACTS}
    for start in (i + 1 for i, word in enumerate(words) if word == "the"):
        for length in range(1, _PARTY_MAX_WORDS + 1):
            party, after = words[start : start + length], start + length
            if after >= len(words) or any(word in _ASKER for word in party):
                break
            verb = after + 2 if tuple(words[after : after + 2]) in _ABLE_TO else after
            if verb >= len(words) or word_stem(words[verb]) not in actions:
                continue
            theirs = _party_things(other, party) & askers_things
            # A question that names the party's thing itself ("... the admin password") is no swap of it.
            if theirs - _party_things(words, party):
                return True
    return False


def _party_things(words: Sequence[str], party: Sequence[str]) -> set[str]:
    """The content stems of what `words` write as "the <party> <thing>"."""
    length = len(party)
    return {
        _content_stem(_without_possessive(words[at + 1 + length]))
        for at in range(len(words) - length - 1)
        if words[at] == "the" and tuple(words[at + 1 : at + 1 + length]) == tuple(party)
    }


def owners_swapped(first: str, second: str) -> bool:
    """Whether the two questions give one thing to two owners, each of whom the other question names in another
    role: "Can admins see my messages?" / "Can I see the admins' messages?", "Can my manager see my calendar?" /
    "Can I see my manager's calendar?", "管理员能看到我的消息吗" / "我能看到管理员的消息吗" (cosine 0.96-0.98: the same
    words, who acts on whose swapped); in English also the other party written before the thing without a possessive
    ending ("Can the admin reset my password?" / "Can I reset the admin password?", `_party_swapped`). One thing owned
    by two different owners is no swap when the other owner is not in the other question at all ("someone's
    Snapchat" / "my Snapchat" names no one in common)."""
    (owned_one, named_one), (owned_other, named_other) = _owners(first), _owners(second)
    # 的 also joins a thing to what describes it ("借的钱", "基督教和犹太教的区别"): in Chinese only a swap with the
    # asker on one side is read.
    chinese = _read_as_chinese(first) or _read_as_chinese(second)
    if not chinese and (_party_swapped(first, second) or _party_swapped(second, first)):
        return True
    for thing in owned_one.keys() & owned_other.keys():
        one, other = owned_one[thing], owned_other[thing]
        if one & other or (chinese and _ASKER_MARK not in one | other):
            continue
        if any(owner in named_other for owner in one) and any(owner in named_one for owner in other):
            return True
    return False


# Words around which two things swapped ask one question, between them or anywhere before the first: "the difference
# between A and B", "A or B", "A vs B", "A with B", "is A the same as B", "compare A to B". Any other word between
# them makes a swap two questions: "What if Apple buys Samsung?" / "What if Samsung buys Apple?", "Should I learn
# Python before Java?" / "... Java before Python?".
_SWAP_SYMMETRIC = frozenset(
    """and or nor vs versus with between compared compare comparison like same similar equal equals different differ
    difference both either plus together &""".split()
)


def words_swapped(first: str, second: str) -> bool:
    """Whether two English questions are the same words with two things swapped, no symmetric word before or between
    them (`other_languages.swapped_around`, `_SWAP_SYMMETRIC`): "What if Apple buys Samsung?" / "What if Samsung buys
    Apple?", "How do you convert benzene into toluene?" / "... toluene into benzene?" (cosine near 1: the same
    words); also with the possessive determiners set aside (`_DETERMINERS`), which move with the thing they lead, and
    then on the words' stems, which a swap inflects anew ("Can teachers see student grades?" / "Can students see
    teacher grades?"). Read in a pair with an English function word (`other_languages.reads_as_english`) and no
    Chinese; the other languages have `other_languages.ends_swapped`."""
    one, other = words_read(first), words_read(second)
    if (
        _read_as_chinese(first)
        or _read_as_chinese(second)
        or not (other_languages.reads_as_english(one) or other_languages.reads_as_english(other))
    ):
        return False
    bare_one, bare_other = _without_determiners(one), _without_determiners(other)
    readings = (
        (one, other),
        (bare_one, bare_other),
        (tuple(map(word_stem, bare_one)), tuple(map(word_stem, bare_other))),
    )
    for first_words, second_words in readings:
        swaps = other_languages.swapped_around(first_words, second_words)
        if swaps:
            return not any(_SWAP_SYMMETRIC.intersection((*before, *middle)) for before, middle in swaps)
    return False


# Possessive determiners, which move with the thing they lead when two things are swapped ("Can followers see who I
# follow?" / "Can I see who my followers follow?"): `words_swapped` also reads the words without them.
_DETERMINERS = frozenset({"my", "your", "our", "their"})


def _without_determiners(words: Sequence[str]) -> tuple[str, ...]:
    return tuple(word for word in words if word not in _DETERMINERS)


def opposites_differ(first: str, second: str) -> bool:
    """Whether one question names an action and the other its opposite (`_OPPOSITES`), neither naming both, moves
    something the other way round (`direction_reversed`), compares two things the other way round
    (`comparison_reversed`), asks before an event where the other asks after it (`before_after_differ`) or moves
    something to a thing where the other moves it from that thing (`to_from_differ`); in the multilingual model's
    other languages by `other_languages.opposites_differ`, in Chinese by `chinese_text.opposites_differ`."""
    if (
        direction_reversed(first, second)
        or comparison_reversed(first, second)
        or one_word_opposite(first, second)
        or prefixed_apart(first, second)
        or before_after_differ(first, second)
        or to_from_differ(first, second)
    ):
        return True
    (first_action, first_opposite), (second_action, second_opposite) = _opposite_sides(first), _opposite_sides(second)
    if first_action & second_opposite or first_opposite & second_action:
        return True
    if other_languages.opposites_differ(first, second, words_read(first), words_read(second)):
        return True
    if not (_read_as_chinese(first) and _read_as_chinese(second)):
        return False
    return chinese_text.opposites_differ(
        chinese_text.normalized(first).lower(), chinese_text.normalized(second).lower()
    )


# Periods of time, in the forms a question writes them. "Is the Pro plan billed monthly?" / "... billed annually?"
# (cosine 0.90) and "Can I get a refund after a week?" / "... after a year?" ask two things; a question naming two
# periods ("monthly or annually?") shares one with either.
_PERIODS = tuple(
    frozenset(forms.split())
    for forms in (
        "hour hours hourly",
        "day days daily",
        "week weeks weekly",
        "month months monthly",
        "year years yearly annual annually",
    )
)


# The order of `_PERIODS`, by the names `kinds.CJK_PERIODS` gives.
_PERIOD_ORDER = ("hour", "day", "week", "month", "year")


@lru_cache(maxsize=_TEXTS_KEPT)
def _periods_named(text: str) -> frozenset[int]:
    words = words_read(text)
    named = {i for i, forms in enumerate(_PERIODS) if forms & set(words)}
    named |= {_PERIOD_ORDER.index(name) for name in kinds.CJK_PERIODS.named(text)}
    return frozenset(named | other_languages.periods_named(words))


def periods_differ(first: str, second: str) -> bool:
    """Whether both questions name periods of time and share none (`_PERIODS`; in the multilingual model's other
    languages `other_languages.PERIOD_TERMS`, in the same order, and in Chinese, Japanese and Korean
    `kinds.CJK_PERIODS`)."""
    one, other = _periods_named(first), _periods_named(second)
    return bool(one) and bool(other) and not one & other


def questions_conflict(first: str, second: str) -> str:
    """Why two questions the embedding calls close cannot be the same question, or "" when nothing says so: other
    numbers ("...in 2016" vs "...in 2017"), the opposite polarity ("can" vs "can't"), opposite actions ("open" vs
    "close", `opposites_differ`), who acts on whose swapped (`owners_swapped`), two things swapped in the same words
    (`words_swapped`), other periods ("monthly" vs "annually", `periods_differ`), other plan tiers or kinds of
    account holder ("personal" vs "business account", `kinds.TIERS`), other states of one thing ("shipped" vs
    "delivered", `kinds.STATES`), other days or months (`kinds.DATES`, `kinds.RELATIVE_DATES`), other languages
    (`kinds.LANGUAGES`), the other party of an exchange (`kinds.ROLES`), another group of people (women or men,
    children or adults, part-time or full-time; `kinds.GROUPS`), another part of the day, season or size
    (`kinds.PARTS_OF_DAY`, `kinds.SEASONS`, `kinds.SIZES`) or another point of the compass (`kinds.COMPASS`).
    Embeddings of short questions blur exactly these, a wrong stored answer costs more than a fresh one, and a learned
    model gives no guarantee on them, so they refuse outright."""
    if numbers_in(first) != numbers_in(second):
        return "numbers differ"
    if is_negated(first) != is_negated(second) or other_languages.denied_by_prefix(
        words_read(first), words_read(second)
    ):
        return "negation differs"
    if opposites_differ(first, second):
        return "opposite actions"
    if owners_swapped(first, second):
        return "owners swapped"
    if words_swapped(first, second):
        return "words swapped"
    if periods_differ(first, second):
        return "periods differ"
    if kinds.TIERS.differ(first, second):
        return "tiers differ"
    if kinds.STATES.differ(first, second):
        return "states differ"
    if kinds.DATES.differ(first, second) or any(days.differ(first, second) for days in kinds.RELATIVE_DATES):
        return "days differ"
    if kinds.LANGUAGES.differ(first, second):
        return "languages differ"
    if kinds.ROLES.differ(first, second):
        return "roles differ"
    if any(groups.differ(first, second) for groups in kinds.GROUPS):
        return "groups differ"
    if kinds.PARTS_OF_DAY.differ(first, second):
        return "times of day differ"
    if kinds.SEASONS.differ(first, second):
        return "seasons differ"
    if kinds.SIZES.differ(first, second):
        return "sizes differ"
    if kinds.COMPASS.differ(first, second):
        return "directions differ"
    return ""


def question_is_context_dependent(text: str) -> bool:
    """A follow-up whose meaning leans on earlier turns: it opens like a follow-up ("and for admins?",
    "what about..."), it points back with a pronoun ("how do I change it?"), or it names too little to stand
    alone (a single content word: "pricing?"). Chinese the same way (`chinese_text.leans_on_context`): "那企业用户呢？",
    "它怎么收费？", "费用呢？"."""
    words = words_read(text)
    lowered = " ".join(words)
    if any(lowered.startswith(opener) for opener in _FOLLOWUP_OPENERS):
        return True
    if other_languages.opens_as_followup(text, lowered + " "):
        return True
    if any(w in _ANAPHORA for w in words):
        return True
    if chinese_text.reads_as_chinese(text) and chinese_text.leans_on_context(words):
        return True
    return len(_words_named(words)) <= FOLLOWUP_MAX_CONTENT_WORDS
