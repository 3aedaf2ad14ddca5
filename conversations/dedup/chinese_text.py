"""Chinese as the question rules read it (`question_pairs`): words from a segmenter, quantities written in Chinese
numerals, negations, the words that mark a follow-up, and which words are function words. Pure functions, no I/O but
the segmenter's dictionary, loaded once per process on the first Chinese text.

Words come from jieba's accurate mode (`lcut`, HMM off), not its search mode: search mode repeats the parts of a long
word beside the word itself ("中华人民共和国" also yields 中华, 人民, 共和国...), so a question would have no word
sequence to read a first word, an order or a count of content words from, and one long word would count as several.
HMM off keeps to dictionary words (an unknown name falls into single characters) so that two phrasings of one
question are cut alike: the HMM joins unknown characters differently by their neighbours.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from types import MappingProxyType
from typing import NamedTuple

from kbplatform import chinese_script

# Traditional characters as Simplified ones: the segmenter's dictionary and every word list and formula of these rules
# (negations, numerals, follow-up words, the built-in intents' formulas) are Simplified, so a question is read as its
# Simplified spelling is. Re-exported for the rules' other modules.
from kbplatform.chinese_script import simplified as simplified

# Chinese characters (the unified ideographs, extension A, compatibility ideographs) and 〇, the numeral zero.
HAN = re.compile(r"[\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# Text read this way: it has a Chinese character, or fullwidth digits or letters (which it reads as ASCII ones).
_EAST_ASIAN = re.compile(r"[\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]")
_FULLWIDTH = str.maketrans(
    {
        chr(code): chr(code - 0xFEE0)
        for code in [0xFF0E, *range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]
    }
)


def reads_as_chinese(text: str) -> bool:
    """Whether the question rules read `text` as Chinese (see module doc); text without, English, is read as before."""
    return _EAST_ASIAN.search(text) is not None


def normalized(text: str) -> str:
    """Fullwidth digits, letters and full stop as their ASCII forms ("３．５" is "3.5"); Chinese punctuation kept."""
    return text.translate(_FULLWIDTH)


# jieba's tokenizer, one per process, shared with the ground floor's dictionary reads.
_segmenter = chinese_script.segmenter


@lru_cache(maxsize=1 << 14)
def han_words(run: str) -> tuple[str, ...]:
    """The words of a run of Chinese characters, in order, in Simplified characters (`simplified`)."""
    return tuple(_segmenter().lcut(simplified(run.replace("\u3007", "零")), HMM=False))


@lru_cache(maxsize=1 << 14)
def word_tail(word: str) -> str:
    """The last two characters of a three-character Chinese word when they are a dictionary word themselves, else "".
    jieba's dictionary keeps many a verb with its object as one word (开发票, 改密码, 查订单) that a page writes apart
    (开具电子发票, 修改密码): the tail is the thing acted on, and what a page about it names."""
    if len(word) != 3 or not HAN.fullmatch(word):
        return ""
    tail = word[1:]
    return tail if _segmenter().FREQ.get(tail) else ""


def words_of(text: str, latin_words: Callable[[str], list[str]]) -> list[str]:
    """The words of `text` (already normalized and lowercased) in order: its Chinese runs cut by the segmenter, the
    text between them read by `latin_words`."""
    words: list[str] = []
    position = 0
    for run in HAN.finditer(text):
        words += latin_words(text[position : run.start()])
        words += han_words(run.group())
        position = run.end()
    words += latin_words(text[position:])
    return words


# --- function words ---------------------------------------------------------------------------------------------

# The asking words, as the English one each stands for (the duplicate head's "question word" features compare these).
QUESTION_WORDS: dict[str, str] = {
    **dict.fromkeys("什么 啥 怎么办 咋办 什么样".split(), "what"),
    **dict.fromkeys("为什么 为何 为啥".split(), "why"),
    **dict.fromkeys("怎么 怎样 如何 怎么样 咋 咋样 多少 几 多久 多大 多长".split(), "how"),
    **dict.fromkeys("哪里 哪儿 哪".split(), "where"),
    **dict.fromkeys("何时 几时".split(), "when"),
    "谁": "who",
    **dict.fromkeys("哪个 哪些 哪种 哪家".split(), "which"),
}
# Words that carry no content of a question, like English STOPWORDS: particles, pronouns and pointing words,
# the copula and prepositions, modal verbs, degree adverbs, polite openers, the asking words and yes/no forms, and
# the general nouns English leaves out too ("thing", "way", "people").
STOPWORDS = frozenset(
    """的 地 得 之 了 着 过 吗 呢 吧 啊 呀 哦 嘛 么 啦 哈 嗯
    我 你 您 他 她 它 我们 你们 他们 她们 它们 咱们 自己 大家
    这 那 这个 那个 这些 那些 这样 那样 这么 那么 这种 那种 此 其 该 这里 那里
    是 有 在 做 弄 搞 和 与 及 以及 或 或者 还是 跟 同 把 被 给 对 从 向 到 为 以 于 而 并 且 如果 要是 就 也 都 还
    又 才 只 但 但是 可是 所以 因为 用 还有 另外 此外 而且 并且 然后 至于 同样
    能 能否 可以 可否 会 要 应该 应当 必须 可能
    很 太 最 更 非常 十分 比较 挺 真 一 一个 一些 一下 一点 一样 每 各 所有 任何 其他 其它 别的
    是否 是不是 有没有 可不可以 能不能 会不会 要不要 请 请问 麻烦
    东西 事情 事 人 方法 办法 时候""".split()
) | frozenset(QUESTION_WORDS)


# --- negation -----------------------------------------------------------------------------------------------------

# Negating words as the segmenter cuts them. Words that only contain a negating character are not here and do not
# negate: 不过 (but), 不错 (good), 不同 (different), 无论 (whatever), 非常 (very), 未来 (future), 别人 (others),
# 区别 (difference), 没关系 (never mind), 不好意思 (excuse me), 不知道 (I wonder). 不用 / 无需 (no need to) are
# here: "不用验证码怎么登录" asks the opposite of "用验证码怎么登录".
NEGATIONS = frozenset(
    """不 没 没有 别 未 无 非 并非 并不 不能 不会 不是 不要 不用 不必 不可 不行 不得 不准 不许 不让 不肯 不想 不再 不到
    不了 不够 无法 无需 无须 没法 未能 从未 从不 绝不 决不 永不 尚未 还没 没能""".split()
)
# "Not" as users type it in chat, which the segmenter cuts apart: 木有 / 莫有 (没有, net slang) and Cantonese 冇 ("has
# not"), each only before another word of its clause (木 and 莫 before 有: alone they are "wood" and "do not").
# Cantonese 唔 is left out: it also writes sounds ("唔哩亲故" is Korean 우리 친구) and "hmm". word -> what must follow.
_CHAT_NEGATIONS = {"木": "有", "莫": "有", "冇": ""}
# Words of the form X不Y that are not "cannot": sorry, great, almost, no wonder, maybe...
_NOT_NEGATIONS = frozenset("对不起 了不起 差不多 怪不得 恨不得 巴不得 说不定 大不了 少不了 免不了 不得不".split())
# Ending a clause, these ask "or not?" ("花呗支持加油卡不", "快递上班了没", "有…没有"): a question tag, not a denial.
_QUESTION_TAGS = frozenset("不 没 否".split())
# 不 before these is no denial: "I don't know / I'm not sure ..." hedges a question, 不客气 is "you're welcome", 不小心
# is "by accident" ("不小心删了" asks what "误删" asks; the segmenter cuts it 不 + 小心), and 不一样, 不一致, 不统一,
# 不相同 say "different", as 不同 does ("有什么区别" asks what "哪里不一样" asks). Not 不符合 ("does not meet": the
# labelled pairs ask it as 不满足, 未通过).
_NOT_DENIED = frozenset("知道 清楚 确定 晓得 了解 客气 小心 一样 一致 统一 相同".split())
# 不是 before "the same" says "different" too: "不是同一个账号" asks what "账号不一样" asks. The segmenter cuts 同一个
# whole, or 同 + 一种 / 一家.
_NOT_THE_SAME = frozenset("一样 一致 相同 同样".split())


def _not_the_same(words: Sequence[str], index: int) -> bool:
    """Whether `words[index]`, 不是, reads "is not the same (one)": 不是同一个, 不是一样的, 不是同 + 一家."""
    after = words[index + 1] if index + 1 < len(words) else ""
    then = words[index + 2] if index + 2 < len(words) else ""
    return words[index] == "不是" and (
        after in _NOT_THE_SAME or after.startswith("同一") or (after == "同" and then.startswith("一"))
    )


def _a_not_a(words: Sequence[str], index: int) -> bool:
    """Whether `words[index]` is the "not" of an A-not-A question ("能不能" cut 能 + 不能, "收不收费" cut 收 + 不 +
    收费), which asks and does not deny."""
    word = words[index]
    before = words[index - 1] if index else ""
    after = words[index + 1] if index + 1 < len(words) else ""
    return word in NEGATIONS and bool(before) and (before == word[1:] or (len(word) == 1 and after.startswith(before)))


def _negates(words: Sequence[str], index: int) -> bool:
    """Whether `words[index]`, in a clause cut into `words`, denies something."""
    word = words[index]
    after = words[index + 1] if index + 1 < len(words) else ""
    if word in NEGATIONS:
        tag = not after and index > 0 and (word in _QUESTION_TAGS or (word == "没有" and "有" in words[:index]))
        # 要不 is "how about" / "or else" ("要不这边给您…").
        set_phrase = word == "不" and (after in _NOT_DENIED or (index and words[index - 1] == "要"))
        return not (_a_not_a(words, index) or tag or set_phrase or _not_the_same(words, index))
    if word == "没收" and after == "到":
        return True  # the segmenter cuts 没收到 (not received) as 没收 (confiscate) + 到
    if len(word) >= 3 and word[0] == "非" and not word.startswith("非常"):
        return True  # a negated noun the segmenter keeps whole: 非会员 (non-member), 非主流; 非常 is "very"
    if len(word) >= 3 and word.startswith(("不含", "不包")):
        return True  # "not including", kept whole: 不含税 (before tax is added), 不包邮
    if word in _CHAT_NEGATIONS and after and after.startswith(_CHAT_NEGATIONS[word]):
        return not (index and words[index - 1] == "有")  # 有木有 asks "is there?" as 有没有 does
    # A potential complement ("打不开" can't open, "找不着" can't find), but not an A-not-A word ("是不是").
    return len(word) == 3 and word[1] in "不没" and word[0] != word[2] and word not in _NOT_NEGATIONS


def negated(text: str) -> bool:
    """Whether `text` (normalized, lowercased) says no in Chinese, read clause by clause (a run of Chinese
    characters), so that a clause-final 不 / 没 reads as the question tag it is."""
    for run in HAN.finditer(text):
        words = han_words(run.group())
        if any(_negates(words, index) for index in range(len(words))):
            return True
    return False


# --- opposite actions ---------------------------------------------------------------------------------------------


class _Opposite(NamedTuple):
    """Two opposite actions: the words that name each (`one`, `other`), and what else says a question touches that
    side at all (`one_also`, `other_also`: a bare character of the action, a state such as 恢复 / 重新 that leads back
    to it). A question names a side when it has one of that side's words and touches the other side nowhere."""

    one: re.Pattern[str]
    other: re.Pattern[str]
    one_also: re.Pattern[str]
    other_also: re.Pattern[str]


# A pattern that matches nothing: a pair whose sides nothing else touches.
_NEVER = "(?!)"


def _opposite(one: str, other: str, one_also: str, other_also: str) -> _Opposite:
    return _Opposite(re.compile(one), re.compile(other), re.compile(one_also), re.compile(other_also))


# The actions a help centre's questions ask in two directions. The other side's words are read first and taken out,
# because some hold this side's ("取消关注" holds 关注, "退出登录" holds 登录, "恢复删除" holds 删除). Left out, because
# the labelled Chinese pairs ask one question with both sides: 冻结 / 解冻 and 锁定 / 解锁 ("账户被冻结怎么办" asks how
# to unfreeze), 收款 / 付款, 发送 / 接收, 借款 / 还款. Left and right are here too (左眼皮 / 右眼皮), but not 左右
# ("about").
_OPPOSITE_ACTIONS = (
    _opposite("开启|打开|开通|启用", "关闭|关掉|停用|禁用", "开|启|恢复|重新", "关|停|取消|注销"),
    _opposite("设置|开通|开启|打开", "取消", "设|开|启|恢复|重新", "关|停"),
    _opposite("绑定|绑卡", "解绑|解除绑定|取消绑定", "绑|关联|重新", "解|换|取消"),
    _opposite("上传", "下载", "传", "下"),
    _opposite("导入", "导出", "入", "出"),
    _opposite("登录|登陆|登入", "退出登录|退出登陆|退出账号|退出帐号|登出", "登", "退出|切换"),
    _opposite("注册", "注销", "开通|申请", "销|关闭"),
    _opposite("添加|新增|加入|增加", "删除|移除|删掉|移出", "加|增", "删|移|去掉|减"),
    _opposite("删除|删掉|误删|删了", "恢复(?:删除|误删|删掉)?|找回|还原", "删", "撤销"),
    _opposite("升级", "降级", "升", "降"),
    _opposite("提高|提升|调高|上调|增加", "降低|调低|下调|减少", "提|高|升|增|涨|恢复|调回", "降|低|减|少"),
    _opposite("充值|存入|存钱", "提现|取出|取钱|取款", "充|存", "提|取"),
    _opposite("显示", "隐藏", "显", "隐"),
    _opposite("关注", "取消关注", "关注", "取消"),
    _opposite("订阅", "取消订阅|退订", "订", "退|取消"),
    _opposite("最多|最大|最高|最长", "最少|最小|最低|最短", "大|高|长|上限", "小|低|短|下限"),
    _opposite("(?<!左)左(?!右)", "(?<!左)右", "左", "右"),
    _opposite("线上|网上|在线", "线下|门店|实体店", "网店|官网", "到店"),
    _opposite("买家|买方", "卖家|卖方", "买", "卖"),
    _opposite("发件人|寄件人", "收件人|收货人", "寄|发", "收"),
    _opposite("以上", "以下", "超过|大于|高于|至少", "低于|小于|不足|不到|以内"),
    _opposite("上午", "下午", "早上", "晚上"),
    _opposite("上移|向上|往上|上滑|上拉|上翻", "下移|向下|往下|下滑|下拉|下翻", "置顶", "置底"),
    _opposite("内部|内网", "外部|外网", "对内", "对外"),
    _opposite("免费", "付费", "不要钱|不花钱", "花钱|要钱|收费"),
    _opposite("国内|境内", "国际|国外|境外|海外|出国", "内地|本地", "跨境|外币"),
    _opposite("周末|双休日|周六|周日|星期六|星期天|星期日", "工作日|周一到周五|周一至周五", "节假日|休息日", "上班日"),
    _opposite("单程", "往返|来回", "单趟", "双程"),
    _opposite("普通快递|普通件|普快|平邮|标准配送|标准快递|普通配送", "加急|特快|急件|次日达|当日达", "慢递", "闪送"),
    _opposite("(?<!非)高峰|峰时", "低谷|平峰|谷时|非高峰", "尖峰", "谷段"),
    _opposite("入住|办理入住", "退房|离店", "住|入", "退"),
    _opposite("上铺|上层", "下铺|下层", _NEVER, _NEVER),
    _opposite("室内|户内", "室外|户外|露天", _NEVER, _NEVER),
    _opposite("税前", "税后", _NEVER, _NEVER),
    _opposite("取车|提车|取件", "还车|寄件", _NEVER, _NEVER),
    _opposite("顶部|顶端|页眉", "底部|底端|页脚", _NEVER, _NEVER),
    _opposite("深色|暗黑|黑色模式", "浅色|白色模式|亮色", _NEVER, _NEVER),
    _opposite("横屏|横向|横版", "竖屏|纵向|竖版", _NEVER, _NEVER),
    _opposite("有线", "无线", _NEVER, _NEVER),
    _opposite("热水", "冷水|凉水", _NEVER, _NEVER),
    # Not 出租车 (a taxi).
    _opposite("(?<!出)租车|租房|租用|租赁", "买车|买房|购车|购房", _NEVER, _NEVER),
    _opposite("主卡", "副卡|附属卡", _NEVER, _NEVER),
    _opposite("批发", "零售", _NEVER, _NEVER),
    _opposite("单人间|单人房", "双人间|双人房", _NEVER, _NEVER),
    _opposite("撤销|撤回", "重做", _NEVER, _NEVER),
    _opposite("调快|加速|快进", "调慢|减速|慢放", _NEVER, _NEVER),
    _opposite("收入", "支出", _NEVER, _NEVER),
    _opposite("注册", "登录|登陆", _NEVER, _NEVER),
    _opposite("全额(?:退|还|返|付)|全款", "部分(?:退|还|返|付)|一部分(?:退|还)", "全部", "局部"),
    _opposite("开门|开始营业|开业|开店", "关门|打烊|停止营业|结束营业|关店|闭店", "开", "关|停"),
    _opposite("开通|开户|开卡|办卡|办理", "注销|销户|销卡", "开|办|申请", "销|关闭|取消"),
    _opposite("延期|推迟|延后|推后|顺延", "提前", "延|推|晚", "早|提"),
    _opposite("合并|合单|合到一起|合在一起", "拆分|拆开|拆单|分开", "合", "拆|分"),
    _opposite(
        "(?<!手)(?:续保|续费|续订|续约|续期|续租|续签|续借|续卡)", "退保|退费|退租|解约|退款|退钱", "(?<!手)续", "退"
    ),
    _opposite("暂停|中止|取消", "恢复|重新开启|重新开通|继续", "停", "恢复|重新|继续"),
    _opposite(
        "新用户|新客户|新会员|新客|新人",
        "老用户|老客户|老会员|老客|老顾客|现有用户|现有客户",
        "新注册|首次|首单",
        "已有",
    ),
)
# A passive (被绑定, 被注册, 被删除) tells a state someone else brought about, which a question asks to undo or to
# understand: either side's question may ask it, so a passive question names no side.
_PASSIVE = "被"
# Questions of size hold characters of both sides of "most" / "least" (多少 holds 少, 多长 holds 长): read as neither.
_SIZE_QUESTIONS = re.compile(r"多少|多久|多长|多大|多高|多远")
# A word of two characters, then "before" or "after" it: 发货前 / 发货后, 付款之前 / 付款以后.
_BEFORE_AFTER = re.compile(r"([\u4e00-\u9fff]{2})(之前|以前|前|之后|以后|后)")


@lru_cache(maxsize=1 << 12)
def _sides_named(text: str) -> tuple[int | None, ...]:
    """For each of `_OPPOSITE_ACTIONS`, the side `text` names (0 or 1), or None: it names neither, or touches both.
    Kept per text: a turn's question is read against each candidate."""
    if _PASSIVE in text:
        return (None,) * len(_OPPOSITE_ACTIONS)
    text = _SIZE_QUESTIONS.sub(" ", text)
    named: list[int | None] = []
    for opposite in _OPPOSITE_ACTIONS:
        other = opposite.other.search(text) is not None
        rest = opposite.other.sub(" ", text)
        one = opposite.one.search(rest) is not None
        bare = opposite.one.sub(" ", rest)
        touches_one = one or opposite.one_also.search(bare) is not None
        touches_other = other or opposite.other_also.search(bare) is not None
        named.append(0 if one and not touches_other else 1 if other and not touches_one else None)
    return tuple(named)


@lru_cache(maxsize=1 << 12)
def _before_after(text: str) -> Mapping[str, frozenset[str]]:
    """The words `text` puts "before" or "after" (`_BEFORE_AFTER`), each with the sides it takes; kept per text."""
    taken: dict[str, set[str]] = {}
    for match in _BEFORE_AFTER.finditer(text):
        taken.setdefault(match.group(1), set()).add("before" if "前" in match.group(2) else "after")
    return MappingProxyType({word: frozenset(sides) for word, sides in taken.items()})


# A move from one thing to another: 从 X, then the verb of the move, then Y ("把钱从余额转到银行卡", "从个人账户切换到
# 企业账户"). Y runs to punctuation or a sentence-final particle, so it may hold what the question asks about the move
# ("从储蓄卡转到信用卡要手续费吗": Y is 信用卡要手续费); X ends at the verb.
_MOVE = re.compile(
    r"从([\u4e00-\u9fffa-z0-9]{1,12}?)(?:转到|转入|转至|转为|转成|切换到|切换成|切换为|换到|换成|改到|改成|改为|移到|迁移到|"
    r"升级到|降级到|到)([\u4e00-\u9fffa-z0-9]{1,12}?)(?=[，,。？?！!、；;]|[吗呢吧啊呀么]|$)"
)


@lru_cache(maxsize=1 << 12)
def _moves(text: str) -> frozenset[tuple[str, str]]:
    return frozenset(
        (match.group(1), match.group(2)) for match in _MOVE.finditer(text) if match.group(1) != match.group(2)
    )


def opposites_differ(first: str, second: str) -> bool:
    """Whether one question (normalized, lowercased, Chinese) asks one side of an action and the other its opposite
    ("怎么导出数据" / "怎么导入数据", "怎么开通自动续费" / "怎么关闭自动续费"), one asks before something and the
    other after the same thing ("发货前能退款吗" / "发货后能退款吗"), neither touching both; or one moves something
    from X to Y and the other from Y to X ("从余额转到银行卡" / "从银行卡转到余额")."""
    first, second = simplified(first), simplified(second)
    if any(
        source != other_source and other_to.startswith(source) and to.startswith(other_source)
        for source, to in _moves(first)
        for other_source, other_to in _moves(second)
    ):
        return True
    for one, other in zip(_sides_named(first), _sides_named(second), strict=True):
        if one is not None and other is not None and one != other:
            return True
    first_taken, second_taken = _before_after(first), _before_after(second)
    return any(
        len(first_taken[word]) == len(second_taken[word]) == 1 and first_taken[word] != second_taken[word]
        for word in first_taken.keys() & second_taken.keys()
    )


# --- numbers ------------------------------------------------------------------------------------------------------

_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_UNITS = {"十": 10, "百": 100, "千": 1000}
_BIG_UNITS = {"万": 10**4, "亿": 10**8}
_NUMERAL_CHARACTERS = frozenset(_DIGITS) | frozenset(_UNITS) | frozenset(_BIG_UNITS)
# Measure words and units a numeral may carry in one word ("三个", "十二月", "五万元"): a numeral followed by
# anything else is part of another word ("一下", "三星", "二手").
MEASURES = frozenset(
    """个 位 名 人 次 遍 回 趟 天 日 号 月 年 周 岁 小时 时 分 分钟 秒 秒钟 点 点钟 刻 元 块 角 毛
    块钱 元钱 张 本 条 件 台 部 辆 家 层 楼 级 年级 倍 成 折 期 代 版 章 节 页 行 种 类 项 笔 单
    份 套 只 双 对 组 米 公里 厘米 毫米 克 公斤 斤 吨 升 毫升 度 站 步 句 位数 星期 季度 季 集
    届 册 卷 课 题 关 轮 万元 亿元 月份""".split()
)
# Measures after which a lone digit is the tenths ("一米五" 1.5 m, "两块五" 2.5 yuan, "三点五" 3.5).
_TENTHS_AFTER = frozenset("点 块 米 斤 毛 元".split())
# Words made of a numeral and a measure that are not a quantity: 十分 (very), and units of their own (千克 kg).
_NOT_QUANTITIES = frozenset("十分 千克 千米 千瓦 百米 万分".split())
_ORDINAL_PREFIXES = ("第", "百分之")  # "第三" is 3 as "3rd" is; "百分之五" is 5 as "5%" is
# The ordinal "first" in its other spellings, read as 第一: "第1次" (a 1 with a measure is otherwise no quantity) and 首
# before a measure of turns or time ("首次", "首单", "首月"; not 首页, the home page, nor 首付, the down payment).
_FIRST_SPELLINGS = re.compile(r"第\s*1(?![0-9.,])|首(?=[次单月期笔年日周])")
_ARABIC_BEFORE = re.compile(r"(?<![A-Za-z0-9.,])(\d+(?:\.\d+)?)$")


def _numeral_parts(word: str) -> tuple[str, str, str] | None:
    """(ordinal prefix, numeral, measure) of a word that is a numeral, optionally with a prefix and a measure."""
    if word in _NOT_QUANTITIES:
        return None
    prefix = next((p for p in _ORDINAL_PREFIXES if word.startswith(p) and len(word) > len(p)), "")
    rest = word[len(prefix) :]
    length = next((i for i, char in enumerate(rest) if char not in _NUMERAL_CHARACTERS), len(rest))
    if not length or (rest[length:] and rest[length:] not in MEASURES):
        return None
    return prefix, rest[:length], rest[length:]


def is_numeral_word(word: str) -> bool:
    """A word that is a number ("三", "十二月", "第三"), which counts as no content word (as digits do)."""
    return _numeral_parts(word) is not None


def numeral_value(numeral: str) -> int | None:
    """The value of a Chinese numeral ("两千五" 2500, "十二" 12, "三亿五千万", "二零二三" read digit by digit), or
    None for characters that are no number ("万一", "千万" as in "must", "三五万" or "两三" a range)."""
    if not any(char in _UNITS or char in _BIG_UNITS for char in numeral):
        digits = [_DIGITS[char] for char in numeral]
        if len(digits) == 2 and digits[1] - digits[0] == 1:
            return None  # two neighbouring digits are a rough range ("两三天", "一两个"), not a number
        return int("".join(map(str, digits)))
    if numeral[0] not in _DIGITS and numeral[0] != "十":
        return None
    total = section = 0
    digit: int | None = None
    last_unit = 10**5
    for char in numeral:
        if char in _DIGITS:
            if digit:
                return None
            digit = _DIGITS[char]
        elif char in _UNITS:
            if _UNITS[char] >= last_unit or (digit is None and (char != "十" or section or total)):
                return None
            section += (1 if digit is None else digit) * _UNITS[char]
            digit, last_unit = None, _UNITS[char]
        else:
            section += digit or 0
            if not section:
                return None
            big = _BIG_UNITS[char]
            total = (total + section) * big if big == 10**8 else total + section * big
            section, digit, last_unit = 0, None, 10**5
    if digit:
        # A last digit right after a unit counts in the unit below it: "两千五" is 2500, "三万五" 35000.
        before = numeral[-2] if len(numeral) > 1 else ""
        digit *= (_UNITS.get(before) or _BIG_UNITS.get(before, 10)) // 10
    return total + section + (digit or 0)


def _canonical(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else format(value.normalize(), "f")


class _NumeralRun(NamedTuple):
    prefix: str  # 第 or 百分之, or ""
    numeral: str
    measure: str  # the measure its last word carries, or ""
    follows: bool  # it starts at the word right after the run before it


def _numeral_runs(words: Sequence[str]) -> list[_NumeralRun]:
    """The runs of numeral words: adjacent ones form one number ("两" + "千五" is 2500), a measure ends a run and a
    prefix starts one."""
    runs: list[_NumeralRun] = []
    prefix, numeral, start, last_end = "", "", 0, -1
    for index, word in enumerate([*words, ""]):
        parts = _numeral_parts(word) if word else None
        if numeral and (parts is None or parts[0]):
            runs.append(_NumeralRun(prefix, numeral, "", start == last_end))
            numeral, last_end = "", index
        if parts is None:
            continue
        if not numeral:
            prefix, start = parts[0], index
        numeral += parts[1]
        if parts[2]:
            runs.append(_NumeralRun(prefix, numeral, parts[2], start == last_end))
            numeral, last_end = "", index + 1
    return runs


def _run_values(runs: list[_NumeralRun]) -> set[str]:
    """The quantities of numeral runs: a lone 一 is none; a lone digit right after a run that ends in a measure like
    米 is that run's tenths ("一米五" is 1.5, "两块五" 2.5)."""
    values: set[str] = set()
    previous: tuple[Decimal, str] | None = None
    for run in runs:
        value = numeral_value(run.numeral)
        if value is None:
            previous = None
            continue
        if previous and previous[1] in _TENTHS_AFTER and run.follows and not run.prefix and len(run.numeral) == 1:
            values.discard(_canonical(previous[0]))
            values.add(_canonical(previous[0] + Decimal(value) / 10))
            previous = None
            continue
        if run.prefix or run.numeral != "一":
            values.add(_canonical(Decimal(value)))
        previous = (Decimal(value), run.measure)
    return values


def _unit_multiple(word: str) -> int | None:
    """What a word of units alone multiplies a number written in digits by ("3万" 30000, "2千万"), else None."""
    parts = _numeral_parts(word)
    if parts is None or parts[0] or not all(char in _UNITS or char in _BIG_UNITS for char in parts[1]):
        return None
    multiple = 1
    for char in parts[1]:
        multiple *= _UNITS.get(char) or _BIG_UNITS[char]
    return multiple


def _nicknames_dropped(words: Sequence[str]) -> list[str]:
    """`words` with a lone digit after 小 / 老 left out: 小二 (the shop's assistant), 老三 (the third child) name
    someone, they count nothing."""
    return [
        "" if word in _DIGITS and index and words[index - 1] in ("小", "老") else word
        for index, word in enumerate(words)
    ]


def chinese_quantities(text: str) -> tuple[set[str], str]:
    """The quantities `text` (normalized) writes with Chinese numerals, as digit strings ("五万" and "5万" are
    "50000", "两" is "2", "第三" is "3"), and `text` with the digits it read so blanked out, for the Arabic reading.

    A lone 一 is no quantity, with or without a measure ("一个", "一下", "一点"): it is mostly the article "a", as
    English "one" is no number to these rules; so is a 1 with a measure ("1个"), which reads the same. The ordinal
    "first" is 1 in every spelling ("第一次", "第1次", "首次"). Words where a
    numeral character is part of another word (统一, 万一, 一般, 一起) are not numerals to the segmenter, so they are
    none either."""
    quantities: set[str] = set()
    text = _FIRST_SPELLINGS.sub("第一", text)
    for run in HAN.finditer(text):
        words = _nicknames_dropped(han_words(run.group()))
        arabic = _ARABIC_BEFORE.search(text, 0, run.start())
        if arabic:
            multiple = _unit_multiple(words[0])
            if multiple:
                quantities.add(_canonical(Decimal(arabic.group(1)) * multiple))
                words = words[1:]
            if multiple or (arabic.group(1) == "1" and words[0] in MEASURES):
                text = text[: arabic.start()] + " " * len(arabic.group(1)) + text[arabic.end() :]
        quantities |= _run_values(_numeral_runs(words))
    return quantities, text


# --- follow-ups ---------------------------------------------------------------------------------------------------

# First words of a follow-up ("那企业用户呢？", "还有别的办法吗？", "另外，..."), like English "and", "also", "but".
# Not 还 (mostly "still" or "repay") nor 和 (a title's first word as often as "and").
FOLLOWUP_OPENERS = frozenset("那 那么 还有 还是 另外 此外 而且 并且 但是 可是 不过 然后 所以 或者 也 同样 至于".split())
# Conditionals that make a follow-up when the question asks nothing of its own ("如果是企业账户？"); "如果忘了密码
# 怎么办？" asks its own question.
_CONDITIONALS = frozenset("如果 要是 假如 假设".split())
# Words that point back at an earlier turn, like English "it", "this", "they", "aforementioned". Not 上面 / 前面 /
# 以上, mostly "on" / "in front of" / "or more" after a noun; 那 alone is "then" (an opener at the start).
ANAPHORA = frozenset(
    """它 它们 他 她 他们 她们 这 这个 那个 这些 那些 这样 那样 这种 那种
    其 此 其中 该 上述 刚才 那里 那儿 前者 后者""".split()
)
# Often written for the asking words 哪个 / 哪些 / 哪里 ("那个网站比较好？"): in a question that asks nothing else they
# are read as those, not as pointing back.
_MISWRITTEN_ASKING = frozenset("那个 那些 那里 那儿".split())
# 这 / 这个 / 那个 before a word of time ("这个月", "这几天", "这一周") is deixis of the calendar, not of an earlier
# turn.
_TIME_WORDS = frozenset("月 星期 周 年 季度 时候 天 次 回 阶段 学期".split())
# 该 before an asking word or a verb of obligation is "should" ("该怎么办"), not "that".
_SHOULD_AFTER = frozenset(QUESTION_WORDS) | frozenset("不 去 用 选".split())
# Words that make a question ask something without an asking word: yes/no particles and A-not-A forms.
_YES_NO = frozenset("吗 么 嘛 是否 是不是 有没有 可不可以 能不能 会不会 要不要 对不对 好不好 行不行".split())


def _asks(words: Sequence[str]) -> bool:
    """Whether Chinese words ask something of their own: an asking word, a yes/no particle or an A-not-A form."""
    return any(word in QUESTION_WORDS or word in _YES_NO for word in words) or any(
        _a_not_a(words, index) for index in range(len(words))
    )


def _points_back(words: Sequence[str], index: int, *, asks: bool) -> bool:
    word = words[index]
    after = words[index + 1] if index + 1 < len(words) else ""
    if word not in ANAPHORA or (word in _MISWRITTEN_ASKING and not asks):
        return False
    if word in ("这个", "那个", "这") and (after in _TIME_WORDS or after[-1:] in ("天", "月", "年", "周")):
        return False
    return word != "该" or bool(after and after not in _SHOULD_AFTER)


def leans_on_context(words: Sequence[str]) -> bool:
    """Whether Chinese words read as a follow-up: they open like one ("那...", "还有...", "另外..."), point back ("它",
    "这个", "该账户"), ask "what about X" with no question of their own ("费用呢？", "那...呢"), or are a condition
    that asks nothing ("如果是企业账户？")."""
    if not words:
        return False
    asks = _asks([word for word in words if word != "呢"])
    if words[0] in FOLLOWUP_OPENERS or (words[-1] == "呢" and not asks):
        return True
    if not asks and any(word in _CONDITIONALS for word in words[:2]):
        return True
    return any(_points_back(words, index, asks=asks) for index in range(len(words)))
