"""Which plan tier or kind of account holder a question names, in the languages users write. Pure functions, no I/O.

"Can a personal account receive international payments?" and the same of a business account, "个人账户每天能转多少钱"
and "企业账户...", "無料プラン" and "有料プラン" sit as close to either embedding as a rewording does, and the
duplicate head refuses many of them by a thin margin only: the answer differs by the tier, so two questions naming
tiers and sharing none (`tiers_differ`) refuse outright, as two periods of time do.

A tier word counts only beside what it qualifies (a plan, version, edition, subscription or account; a customer or
user for the account holder kinds): "personal information", "business days", "team members" and "free shipping" name
no tier. Words for the same kind read as one ("company account" is a "business account", "公司账户" a "企业账户",
"기업 계정" a "법인 계정", "compte pro" a "compte professionnel"), so those rewordings pass. A question naming two tiers
("upgrade from the Basic plan to Pro") shares one with either side, and a question naming none is left to the other
checks and the head.
"""

from __future__ import annotations

import re
from functools import lru_cache

_TEXTS_KEPT = 1 << 12

# English (and the same loan words in German, Dutch and the Romance languages): the nouns a tier qualifies.
_PLAN = r"[ -](?:plans?|tiers?|versions?|editions?|subscriptions?|licen[cs]es?|packages?|memberships?|tarif|paket)\b"
_HOLDER = r"[ -](?:accounts?|customers?|clients?|users?)\b"
# Chinese (Simplified and Traditional) and Japanese nouns after a tier; a lookbehind keeps counting out ("一个人").
_ZH_TIER = r"(?:版|套餐|プラン|会員)"
_CJK_HOLDER = (
    r"(?:账户|账号|帐户|帐号|賬戶|帳戶|帳號|用户|用戶|客户|客戶|会员|會員|名义|名義|认证|認證|网银|網銀|贷款|貸款|版"
    r"|口座|アカウント|向け|プラン|契約|のお客様)"
)
_NOT_COUNTED = r"(?<![一二三四五六七八九十两兩几幾每这這那哪某整0-9])"
_KO_HOLDER = r" ?(?:회원|계정|고객|사용자|요금제|플랜|통장|계좌)"
_KO_PLAN = r" ?(?:요금제|플랜|버전|회원|계정|사용자)"
# Romance languages put the noun first.
_RO_HOLDER = r"\b(?:cuentas?|contas?|cont[oi]|comptes?|clientes?|clients?|clienti|planos?|plan(?:es)?|offres?)"
_RO_PLAN = (
    r"\b(?:plan(?:es)?|planos?|piano|piani|versi[oó]n|versão|versao|versione|offres?|forfaits?|tarifas?"
    r"|cuentas?|contas?|comptes?)"
)
_RU_PLAN = r"\s(?:тариф\w*|верси\w+|план\w*|аккаунт\w*|подписк\w+)"

# One pattern per kind, written as its alternatives; the names are what `tiers_named` returns.
_TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "personal",
        (
            rf"\b(?:personal|individual){_PLAN}",
            rf"\b(?:personal|individual|private){_HOLDER}",
            rf"{_NOT_COUNTED}(?:个人|個人|对私|對私){_CJK_HOLDER}",
            rf"개인(?! ?사업자){_KO_HOLDER}",
            rf"{_RO_HOLDER} (?:personal|pessoal|personale|personnel|particular|particulier|individual|individuel)\b",
            rf"{_RO_HOLDER} (?:privad[oa]|privato)\b",
            r"pessoa f[ií]sica|\bparticuliers\b|\bprivat(?:kund\w*|kont\w*)|\bprivérekening|\bparticuliere rekening",
            r"физическ\w+ лиц|\bфизлиц",
        ),
    ),
    (
        "business",
        (
            rf"\b(?:business|company|corporate|commercial|organi[sz]ation)(?:{_PLAN}|{_HOLDER})",
            rf"(?:企业|企業|公司|法人|对公|對公|单位|單位|商户|商戶){_CJK_HOLDER}|企業向け|ビジネスプラン",
            rf"(?:법인|기업|사업자|개인 ?사업자){_KO_HOLDER}",
            rf"{_RO_HOLDER} (?:empresarial|de empresas?|de negocios|corporativ[oa]|comercial|profesional|pro)\b",
            rf"{_RO_HOLDER} (?:professionnel(?:le)?|d'entreprise|entreprise|aziendale|business|jur[ií]dica|pj)\b",
            r"pessoa jur[ií]dica|\bprofessionnels\b|\b(?:geschäfts|firmen|unternehmens)(?:kund\w*|kont\w*)",
            r"\bzakelijke? rekening|\bbedrijfsrekening|юридическ\w+ лиц|\bюрлиц",
        ),
    ),
    (
        "free",
        (
            rf"\bfree(?:{_PLAN}|{_HOLDER})|(?:免费|免費){_ZH_TIER}|(?:免费|免費)(?:用户|用戶|账户|账号|会员)",
            rf"無料(?:プラン|版|会員|アカウント|ユーザー)|무료{_KO_PLAN}",
            rf"{_RO_PLAN} (?:gratuit[oa]?|gratuite|gratis|grátis)\b|\bkostenlos\w* (?:version|tarif|konto|plan)",
            rf"\bgratis versie|бесплатн\w+{_RU_PLAN}",
        ),
    ),
    (
        "paid",
        (
            rf"\bpaid(?:{_PLAN}|{_HOLDER})|(?:付费|付費|收费|收費|会员|會員){_ZH_TIER}",
            r"(?:付费|付費)(?:用户|用戶|账户|账号|会员)",
            rf"有料(?:プラン|版|会員|アカウント|ユーザー)|유료{_KO_PLAN}",
            rf"{_RO_PLAN} (?:de pago|pag[oa]|payante?|a pagamento)\b",
            r"\bkostenpflichtig\w* (?:version|tarif|konto|plan)|\bbezahlt\w* (?:version|tarif)|\bbetaalde versie",
            rf"\bплатн\w+{_RU_PLAN}",
        ),
    ),
    ("trial", (rf"\btrial(?:{_PLAN}|{_HOLDER})|(?:试用|試用){_ZH_TIER}|お試し(?:プラン|版)|체험판",)),
    (
        "basic",
        (
            rf"\bbasic{_PLAN}|(?:基础|基礎|入门|入門){_ZH_TIER}|ベーシック{_ZH_TIER}|베이직{_KO_PLAN}",
            rf"{_RO_PLAN} (?:básic[oa]|basic[oa]|base|basique)\b",
        ),
    ),
    ("starter", (rf"\bstarter{_PLAN}",)),
    (
        "standard",
        (
            rf"\bstandard{_PLAN}|(?:标准|標準){_ZH_TIER}|スタンダード{_ZH_TIER}|스탠다드{_KO_PLAN}",
            rf"{_RO_PLAN} (?:estándar|estandar|standard)\b",
        ),
    ),
    ("plus", (rf"\bplus{_PLAN}",)),
    (
        "pro",
        (
            rf"\b(?:pro|professional){_PLAN}|(?:专业|專業){_ZH_TIER}|プロ{_ZH_TIER}|프로{_KO_PLAN}",
            rf"{_RO_PLAN} (?:pro|profesional)\b",
        ),
    ),
    (
        "premium",
        (rf"\bpremium{_PLAN}|(?:高级|高級){_ZH_TIER}|プレミアム{_ZH_TIER}|프리미엄{_KO_PLAN}|{_RO_PLAN} premium\b",),
    ),
    ("ultimate", (rf"\bultimate{_PLAN}|(?:旗舰|旗艦|至尊){_ZH_TIER}",)),
    ("team", (rf"\bteam{_PLAN}|(?:团队|團隊){_ZH_TIER}",)),
    ("enterprise", (rf"\benterprise{_PLAN}|エンタープライズ{_ZH_TIER}",)),
    ("family", (rf"\bfamily{_PLAN}|家庭{_ZH_TIER}|ファミリー{_ZH_TIER}",)),
    ("student", (rf"\bstudent{_PLAN}|(?:学生|學生){_ZH_TIER}",)),
)
_TIER_PATTERNS = tuple((name, re.compile("|".join(alternatives))) for name, alternatives in _TIERS)
# One search over every pattern first: most questions name no tier, and one pass rules them out.
_ANY_TIER = re.compile("|".join(pattern.pattern for _, pattern in _TIER_PATTERNS))


@lru_cache(maxsize=_TEXTS_KEPT)
def tiers_named(text: str) -> frozenset[str]:
    """The plan tiers and kinds of account holder `text` names (the names of `_TIERS`), read on its lower-cased text."""
    lowered = text.lower()
    if not _ANY_TIER.search(lowered):
        return frozenset()
    return frozenset(name for name, pattern in _TIER_PATTERNS if pattern.search(lowered))


def tiers_differ(first: str, second: str) -> bool:
    """Whether both questions name a tier or kind of account holder and share none."""
    one, other = tiers_named(first), tiers_named(second)
    return bool(one) and bool(other) and not one & other
