"""Which plan tier, kind of account holder or cabin (`TIERS`), state in the course of a thing (`STATES`), day or month
(`DATES`, `RELATIVE_DATES`), language (`LANGUAGES`), party of an exchange (`ROLES`), group of people a thing is for
(`GROUPS`), part of the day, season, size or point of the compass (`PARTS_OF_DAY`, `SEASONS`, `SIZES`, `COMPASS`) and,
in Chinese, Japanese and Korean, period of time (`CJK_PERIODS`) a question names, and how often, in the languages
users write. Pure functions, no I/O.

"Can a personal account receive international payments?" and the same of a business account, "个人账户每天能转多少钱"
and "企业账户...", "無料プラン" and "有料プラン" sit as close to either embedding as a rewording does; so do "Can I
cancel an order that has shipped?" and "... that has been delivered?", "已发货的订单能取消吗" and "已签收的...", "un
pedido enviado" and "un pedido entregado". The duplicate heads served many of these and refused the others by a thin
margin only. The answer differs by the tier or the state, so two questions each naming one the other does not refuse
outright (`Kinds.differ`), as two periods of time do.

A tier word counts only beside what it qualifies (a plan, version, edition, subscription or account; a customer or
user for the account holder kinds): "personal information", "business days", "team members" and "free shipping" name
no tier. A state counts in the forms that say a thing is in it ("shipped", "has been delivered", "已发货", "発送済み",
"배송 완료", "entregado"), not the verb that asks for it ("how do I cancel", "怎么删除"). Words for one kind read as one
("company account" is a "business account", "公司账户" a "企业账户", "dispatched" is "shipped", "寄出" is "发货", "到期"
is "过期"), so those rewordings pass. A question naming two ("upgrade from the Basic plan to Pro", "it shipped but
never arrived") differs from none that names only one of them or the same two, and a question naming none is left to
the other checks and the head.
"""

from __future__ import annotations

import re
from collections import Counter
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

# A table names each kind with its pattern, or with the pattern's alternatives when they are many; the names are what
# `Kinds.named` returns.
_Table = tuple[tuple[str, str | tuple[str, ...]], ...]


_TIERS: _Table = (
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
    ("trial", rf"\btrial(?:{_PLAN}|{_HOLDER})|(?:试用|試用){_ZH_TIER}|お試し(?:プラン|版)|체험판"),
    (
        "basic",
        (
            rf"\bbasic{_PLAN}|(?:基础|基礎|入门|入門){_ZH_TIER}|ベーシック{_ZH_TIER}|베이직{_KO_PLAN}",
            rf"{_RO_PLAN} (?:básic[oa]|basic[oa]|base|basique)\b",
        ),
    ),
    ("starter", rf"\bstarter{_PLAN}"),
    (
        "standard",
        (
            rf"\bstandard{_PLAN}|(?:标准|標準){_ZH_TIER}|スタンダード{_ZH_TIER}|스탠다드{_KO_PLAN}",
            rf"{_RO_PLAN} (?:estándar|estandar|standard)\b",
        ),
    ),
    ("plus", rf"\bplus{_PLAN}"),
    (
        "pro",
        (
            rf"\b(?:pro|professional){_PLAN}|(?:专业|專業){_ZH_TIER}|プロ{_ZH_TIER}|프로{_KO_PLAN}",
            rf"{_RO_PLAN} (?:pro|profesional)\b",
        ),
    ),
    (
        "premium",
        rf"\bpremium{_PLAN}|(?:高级|高級){_ZH_TIER}|プレミアム{_ZH_TIER}|프리미엄{_KO_PLAN}|{_RO_PLAN} premium\b",
    ),
    ("ultimate", rf"\bultimate{_PLAN}|(?:旗舰|旗艦|至尊){_ZH_TIER}"),
    ("team", rf"\bteam{_PLAN}|(?:团队|團隊){_ZH_TIER}"),
    ("enterprise", rf"\benterprise{_PLAN}|エンタープライズ{_ZH_TIER}"),
    ("family", rf"\bfamily{_PLAN}|家庭{_ZH_TIER}|ファミリー{_ZH_TIER}"),
    ("student", rf"\bstudent{_PLAN}|(?:学生|學生){_ZH_TIER}"),
    # Cabins of a flight or a train.
    (
        "economy cabin",
        (
            r"(?<!premium )\beconomy (?:class|seats?|cabin|tickets?|fares?)\b|(?<!超级)经济舱|(?<!超級)經濟艙",
            r"(?<!プレミアム)エコノミー(?:クラス|席)|(?<!프리미엄 )이코노미(?:석| ?클래스)",
            r"\bclase (?:turista|económica|economica)\b|\bclasse (?:économique|economique|econômica|economica)\b",
        ),
    ),
    ("premium economy cabin", r"\bpremium economy\b|超级经济舱|超級經濟艙|プレミアムエコノミー|프리미엄 ?이코노미"),
    (
        "business cabin",
        (
            r"\bbusiness (?:class|seats?|cabin)\b|商务舱|商務艙|ビジネスクラス|ビジネス席|비즈니스(?:석| ?클래스)",
            r"\bclase (?:ejecutiva|business)\b|\bclasse (?:affaires|executiva|business)\b",
        ),
    ),
    (
        "first cabin",
        r"\bfirst class\b|头等舱|頭等艙|ファーストクラス|퍼스트 ?클래스|일등석|\bprimera clase\b|\bpremière classe\b"
        r"|\bprimeira classe\b",
    ),
)


# States in the course of an order, a request, a record or a voucher. English past participles and adjectives; the
# Chinese, Japanese and Korean forms that say a thing is in the state (已..., ...済み, ... 완료, ...된), and the verb
# alone only where it names the stage ("多久发货"); the Romance and German participles in their gender and number forms.
# "paid" before a plan or account noun is the tier, not a state. Chinese users write 过期, 到期 and 逾期 alike of a
# repayment ("花呗还款逾期怎么处理" / "花呗还款过期会怎么办" is a duplicate of the fintech sets): one state there.
_STATES: _Table = (
    (
        "shipped",
        (
            r"\b(?:shipped|dispatched|despatched|in transit)\b",
            r"发货|發貨|已发出|发出的|已寄出|寄出了|寄出的|已经寄出|已出库|已出庫|运输中|運輸中|待收货|待收貨",
            r"発送済|発送され|出荷済|出荷され|출고된|출고 ?완료|발송된|발송 ?완료|발송됐",
            r"\b(?:enviad[oa]s?|despachad[oa]s?|spedit[oaie]|expédiée?s?|expediée?s?)\b",
            r"\b(?:versandt\w*|versendet\w*|verschickt\w*|verzonden)\b",
        ),
    ),
    (
        "delivered",
        (
            r"\b(?:delivered|arrived|received)\b",
            r"签收|簽收|已收货|已收貨|收到货|收到貨|确认收货|確認收貨|送达|送達|已送到|妥投|已到达|已到達",
            r"配達済|配達完了|到着済|受け取り済|受取済|届いた|배송 ?완료|배달 ?완료|수령한|도착한",
            r"\b(?:entregad[oa]s?|entregues?|recibid[oa]s?|recebid[oa]s?|consegnat[oaie]|livrée?s?|reçue?s?)\b",
            r"\b(?:zugestellt\w*|geliefert\w*|bezorgd)\b",
        ),
    ),
    (
        "submitted",
        r"\bsubmitted\b|已提交|提交的申请|提交申请|申請済|제출된|\b(?:enviada|soumise?s?|eingereicht\w*)\b",
    ),
    (
        "pending",
        (
            r"\b(?:pending|under review|in review|awaiting approval)\b|审核中|審核中|待审核|待審核|审批中",
            r"審批中|处理中|處理中",
            r"審査中|保留中|심사 ?중|검토 ?중|\b(?:pendientes?|en attente|ausstehend\w*|in bearbeitung)\b",
        ),
    ),
    (
        "approved",
        (
            r"\bapproved\b|审核通过|審核通過|通过审核|通過審核|已通过|已通過|已批准|批下来|批下來|审批通过|審批通過",
            r"承認済|承認され|승인된|승인 ?완료",
            r"\b(?:aprobad[oa]s?|aprovad[oa]s?|approuvée?s?|genehmigt\w*|approvat[oaie])\b",
        ),
    ),
    (
        "rejected",
        (
            r"\b(?:rejected|declined|denied)\b|被拒|被驳回|被駁回|已驳回|已駁回|却下され|거절된|반려된",
            r"\b(?:rechazad[oa]s?|recusad[oa]s?|refusée?s?|abgelehnt\w*|rifiutat[oaie])\b",
        ),
    ),
    (
        "completed",
        (
            r"\b(?:completed|fulfilled)\b|已完成|交易成功|完了済|완료된 주문",
            r"\b(?:completad[oa]s?|concluíd[oa]s?|terminée?s?|abgeschlossen\w*)\b",
        ),
    ),
    (
        "cancelled",
        (
            r"\b(?:cancell?ed)\b|已取消|被取消|取消了的|取消的订单|取消的訂單|キャンセル済|キャンセルされ|취소된",
            r"\b(?:cancelad[oa]s?|annulée?s?|storniert\w*|annullat[oaie])\b",
        ),
    ),
    ("refunded", r"\brefunded\b|已退款|退款成功|返金済|환불된|\b(?:reembolsad[oa]s?|remboursée?s?|erstattet\w*)\b"),
    (
        "archived",
        (
            r"\barchived\b|已归档|已歸檔|归档的|歸檔的|アーカイブ済|보관된|\b(?:archivad[oa]s?|arquivad[oa]s?|archivée?s?|archiviert\w*)\b",
        ),
    ),
    (
        "deleted",
        (
            r"\b(?:deleted|removed|trashed)\b|已删除|已刪除|删除的|刪除的|删掉的|刪掉的|被删|被刪|削除済",
            r"削除した|削除され|삭제된|삭제한",
            r"\b(?:eliminad[oa]s?|borrad[oa]s?|excluíd[oa]s?|apagad[oa]s?|supprimée?s?|gelöscht\w*|eliminat[oaie]|verwijderd)\b",
        ),
    ),
    (
        "draft",
        (
            r"\b(?:drafts?|unpublished)\b|草稿|下書き|임시 ?저장",
            r"\b(?:borrador(?:es)?|rascunhos?|brouillons?|entw[üu]rf\w*)\b",
        ),
    ),
    (
        "published",
        (
            r"\bpublished\b|已发布|已發佈|已發布|发布的|發佈的|已发表|已發表|公開済|게시된|\b(?:publicad[oa]s?|publiée?s?|veröffentlicht\w*)\b",
        ),
    ),
    (
        "paid",
        (
            rf"\bpaid\b(?!{_PLAN}|{_HOLDER}|[ -]members?\b)",
            r"已付款|已支付|付过款|付過款|支付成功|付款成功|支払済|결제 ?완료|\b(?:pagad[oa]s?|payée?s?|bezahlt\w*)\b",
        ),
    ),
    (
        "unpaid",
        r"\b(?:unpaid|overdue)\b|待付款|待支付|未払い|미납|연체|\b(?:vencid[oa]s?|impayée?s?|überfällig\w*)\b",
    ),
    ("awaiting shipment", r"待发货|待發貨|未发货|未發貨|発送待ち|발송 ?대기"),
    (
        "expired",
        (
            r"\bexpired\b|过期|過期|逾期|已失效|失效的|到期|期限切れ|만료된|\b(?:caducad[oa]s?|expirad[oa]s?|expirée?s?|abgelaufen\w*|scadut[oaie])\b",
        ),
    ),
    ("used", r"已使用|用过的|用過的|使用过的|使用過的|使用済|사용한|사용된|\b(?:usad[oa]s?|utilisée?s?)\b"),
)


# Days of the week and months, by name. Not read: English "May" and "March" (lower-cased, a verb), the abbreviations
# ("Mon" is French "my", "Sat" and "Sun" are words), Portuguese "segunda" to "sexta" without "-feira" ("segunda vez"),
# Russian "среда" alone ("environment"). Chinese, Japanese and Korean months are numbers, read by `numbers_in`. 周一 ...
# 周日 after a count is "a week" ("一周一次"), not a day.
_ZH_WEEK = r"(?<![一二三四五六七八九十两兩几幾0-9])(?:周|週)"
_DATES: _Table = (
    (
        "monday",
        rf"\bmondays?\b|{_ZH_WEEK}一(?![次回遍个個])|星期一|礼拜一|禮拜一|月曜|월요일|\blunes\b|\blundis?\b"
        r"|\bsegunda-feira|\bmontags?\b|\blunedì|\blunedi\b|\bmaandag|\bпонедельник",
    ),
    (
        "tuesday",
        rf"\btuesdays?\b|{_ZH_WEEK}二(?![次回遍个個])|星期二|礼拜二|禮拜二|火曜|화요일|\bmartes\b|\bmardis?\b"
        r"|\bterça-feira|\bdienstags?\b|\bmartedì|\bmartedi\b|\bdinsdag|\bвторник",
    ),
    (
        "wednesday",
        rf"\bwednesdays?\b|{_ZH_WEEK}三(?![次回遍个個])|星期三|礼拜三|禮拜三|水曜|수요일|\bmiércoles\b|\bmiercoles\b"
        r"|\bmercredis?\b|\bquarta-feira|\bmittwochs?\b|\bmercoledì|\bmercoledi\b|\bwoensdag|\bв среду\b",
    ),
    (
        "thursday",
        rf"\bthursdays?\b|{_ZH_WEEK}四(?![次回遍个個])|星期四|礼拜四|禮拜四|木曜|목요일|\bjueves\b|\bjeudis?\b"
        r"|\bquinta-feira|\bdonnerstags?\b|\bgiovedì|\bgiovedi\b|\bdonderdag|\bчетверг",
    ),
    (
        "friday",
        rf"\bfridays?\b|{_ZH_WEEK}五(?![次回遍个個])|星期五|礼拜五|禮拜五|金曜|금요일|\bviernes\b|\bvendredis?\b"
        r"|\bsexta-feira|\bfreitags?\b|\bvenerdì|\bvenerdi\b|\bvrijdag|\bпятниц",
    ),
    (
        "saturday",
        rf"\bsaturdays?\b|{_ZH_WEEK}六(?![次回遍个個])|星期六|礼拜六|禮拜六|土曜|토요일|\bsábados?\b|\bsabados?\b"
        r"|\bsamedis?\b|\bsamstags?\b|\bsonnabends?\b|\bsabato\b|\bzaterdag|\bсуббот",
    ),
    (
        "sunday",
        rf"\bsundays?\b|{_ZH_WEEK}(?:日|天)|星期日|星期天|礼拜天|礼拜日|禮拜天|禮拜日|日曜|일요일|\bdomingos?\b"
        r"|\bdimanches?\b|\bsonntags?\b|\bdomenica\b|\bzondag|\bвоскресень",
    ),
    ("january", r"\bjanuary\b|\benero\b|\bjanvier\b|\bjanuar\b|\bgennaio\b|\bjaneiro\b|\bjanuari\b|\bянвар"),
    (
        "february",
        r"\bfebruary\b|\bfebrero\b|\bfévrier\b|\bfebruar\b|\bfebbraio\b|\bfevereiro\b|\bfebruari\b|\bфеврал",
    ),
    ("april", r"\bapril\b|\babril\b|\bavril\b|\baprile\b|\bапрел"),
    ("june", r"\bjune\b|\bjunio\b|\bjuin\b|\bjuni\b|\bgiugno\b|\bjunho\b|\bиюн"),
    ("july", r"\bjuly\b|\bjulio\b|\bjuillet\b|\bjuli\b|\bluglio\b|\bjulho\b|\bиюл"),
    ("august", r"\baugust\b|\bagosto\b|\baoût\b|\bagosto\b|\baugustus\b|\bавгуст"),
    ("september", r"\bseptember\b|\bseptiembre\b|\bseptembre\b|\bsettembre\b|\bsetembro\b|\bсентябр"),
    ("october", r"\boctober\b|\boctubre\b|\boctobre\b|\boktober\b|\bottobre\b|\boutubro\b|\bоктябр"),
    ("november", r"\bnovember\b|\bnoviembre\b|\bnovembre\b|\bnovembro\b|\bноябр"),
    ("december", r"\bdecember\b|\bdiciembre\b|\bdécembre\b|\bdezember\b|\bdicembre\b|\bdezembro\b|\bдекабр"),
)

# Days, weeks and months told from today, each scale a table of its own: two questions each naming a day of one
# scale the other does not ask two things ("Can my order arrive today?" / "... tomorrow?", 本周 / 下周), where across
# scales the time is most often the asker's example ("我今天用花呗什么时候还" / "这个月用花呗什么时候还" is a duplicate
# of the fintech sets). "Tonight" is today and "next-day" tomorrow; Spanish "mañana" after "la" and German "Morgen"
# after "am" or "guten" are the morning; French "hier" is German "here", left out.
_RELATIVE_DAYS: _Table = (
    (
        "yesterday",
        r"\byesterday\b|昨天|昨日|어제|\bayer\b|\bgestern\b|\bieri\b|\bontem\b|\bgisteren\b|\bвчера\b",
    ),
    (
        "today",
        r"\b(?:today|tonight)\b|今天|今日|今晚|当天|當天|오늘|\bhoy\b|\bheute\b|\baujourd'hui\b|\boggi\b"
        r"|\bhoje\b|\bvandaag\b|\bсегодня\b",
    ),
    (
        "tomorrow",
        r"\b(?:tomorrow|next[ -]day)\b|明天|明日|明早|明晚|次日|내일|(?<!la )(?<!las )\bmañana\b"
        r"|(?<!am )(?<!guten )\bmorgen\b(?! früh)|\bdemain\b|\bdomani\b|\bamanhã\b|\bзавтра\b",
    ),
)

_RELATIVE_WEEKS: _Table = (
    (
        "last week",
        r"\b(?:last|previous|past) week\b|上周|上週|上星期|上个星期|上個星期|先週|지난 ?주|\bsemana pasada\b"
        r"|\bletzte[n]? woche\b|\bsemaine dernière\b",
    ),
    (
        "this week",
        r"\bthis week\b|本周|本週|这周|這週|这个星期|這個星期|本星期|今週|이번 ?주|\besta semana\b"
        r"|\bdiese[rn]? woche\b"
        r"|\bcette semaine\b|\bquesta settimana\b",
    ),
    (
        "next week",
        r"\bnext week\b|下周|下週|下星期|下个星期|下個星期|来週|다음 ?주|\bpróxima semana\b|\bsemana que viene\b"
        r"|\bnächste[n]? woche\b|\bsemaine prochaine\b|\bprossima settimana\b",
    ),
    ("this weekend", r"\bthis weekend\b|这个周末|這個週末|本周末|今週末|이번 ?주말|\beste fin de semana\b"),
    ("next weekend", r"\bnext weekend\b|下个周末|下個週末|下周末|来週末|다음 ?주말|\bpróximo fin de semana\b"),
)

_RELATIVE_MONTHS: _Table = (
    (
        "last month",
        r"\b(?:last|previous|past) month(?:'s)?\b|上个月|上個月|上月|先月|지난 ?달|\bmes pasado\b"
        r"|\bletzte[nm]? monat\b"
        r"|\bmois dernier\b",
    ),
    (
        "this month",
        r"\bthis month(?:'s)?\b|这个月|這個月|本月|今月|이번 ?달|\beste mes\b|\bdiese[nm]? monat\b|\bce mois-ci\b",
    ),
    (
        "next month",
        r"\bnext month(?:'s)?\b|下个月|下個月|下月|来月|다음 ?달|\bpróximo mes\b|\bnächste[nm]? monat\b"
        r"|\bmois prochain\b",
    ),
)

# Days told from an event the question names: the day before it, the same day, the day after ("Can I cancel the day
# before?" / "... on the day?", 入住前一天 / 入住当天). 当天 and 次日 are also today and tomorrow (`_RELATIVE_DAYS`):
# each table reads them in its own sense, and a pair differs if either table says so.
_EVENT_DAYS: _Table = (
    (
        "day before",
        r"\bthe (?:day|night|evening) before\b|\bthe previous day\b|前一天|前一日|提前一天|前日|전날"
        r"|\bel día anterior\b|\bla víspera\b|\bam vortag\b|\bla veille\b|\bil giorno prima\b"
        r"|\bno dia anterior\b|\bo dia anterior\b",
    ),
    (
        "same day",
        r"\bsame[ -]day\b|\bon the day\b|当天|當天|当日|當日|同日|당일|\bel mismo día\b"
        r"|\bam (?:selben|gleichen) tag\b|\ble jour même\b|\blo stesso giorno\b|\bno mesmo dia\b|\bo mesmo dia\b",
    ),
    (
        "day after",
        r"\bthe (?:day|morning) after\b|\bthe (?:next|following) day\b|\bnext[ -]day\b|后一天|後一天|第二天"
        r"|次日|翌日|다음 ?날|\bel día siguiente\b|\bam (?:nächsten|folgenden) tag\b|\bam folgetag\b"
        r"|\ble lendemain\b|\bil giorno dopo\b|\bno dia seguinte\b|\bo dia seguinte\b",
    ),
)

# Languages, by name, in the languages users write. Spoken and written Chinese (普通话, 中文) read as one; Cantonese is
# another.
_LANGUAGES: _Table = (
    (
        "english",
        r"\benglish\b|英文|英语|英語|영어|\bingl[ée]s\b|\binglês\b|\banglais\b|\benglisch\w*|\binglese\b"
        r"|\bengels\b|\bанглийск",
    ),
    (
        "chinese",
        r"\b(?:chinese|mandarin)\b|中文|汉语|漢語|普通话|普通話|华语|華語|中国語|중국어|\bchino\b|\bchinois\b"
        r"|\bchinesisch\w*|\bcinese\b|\bchinês\b|\bкитайск",
    ),
    ("cantonese", r"\bcantonese\b|粤语|粵語|广东话|廣東話|白话|広東語|광둥어|\bcantonés\b|\bkantonesisch\w*"),
    (
        "japanese",
        r"\bjapanese\b|日文|日语|日語|日本語|일본어|\bjapon[ée]s\b|\bjaponais\b|\bjapanisch\w*|\bgiapponese\b"
        r"|\bjaponês\b|\bяпонск",
    ),
    (
        "korean",
        r"\bkorean\b|韩文|韩语|韓文|韓語|韓国語|한국어|\bcoreano\b|\bcoréen\b|\bkoreanisch\w*|\bкорейск",
    ),
    (
        "spanish",
        r"\bspanish\b|西班牙语|西班牙文|スペイン語|스페인어|\bespañol\b|\bcastellano\b|\bespagnol\b"
        r"|\bspanisch\w*|\bspagnolo\b|\bespanhol\b|\bspaans\b|\bиспанск",
    ),
    (
        "french",
        r"\bfrench\b|法语|法文|法語|フランス語|프랑스어|\bfranc[ée]s\b|\bfrançais\b|\bfrancais\b"
        r"|\bfranzösisch\w*|\bfrancese\b|\bfrancês\b|\bfrans\b|\bфранцузск",
    ),
    (
        "german",
        r"\bgerman\b|德语|德文|德語|ドイツ語|독일어|\balem[áa]n\b|\ballemand\b|\bdeutsch(?:e[nmrs]?)?\b"
        r"|\btedesco\b|\balemão\b|\bduits\b|\bнемецк",
    ),
    (
        "italian",
        r"\bitalian\b|意大利语|イタリア語|이탈리아어|\bitaliano\b|\bitalien\b|\bitalienisch\w*|\bитальянск",
    ),
    (
        "portuguese",
        r"\bportuguese\b|葡萄牙语|ポルトガル語|포르투갈어|\bportugu[ée]s\b|\bportugais\b|\bportugiesisch\w*"
        r"|\bportoghese\b|\bпортугальск",
    ),
    ("russian", r"\brussian\b|俄语|俄文|ロシア語|러시아어|\bruso\b|\brusse\b|\brussisch\w*|\brusso\b|\bрусск"),
    ("arabic", r"\barabic\b|阿拉伯语|アラビア語|아랍어|\bárabe\b|\barabe\b|\barabisch\w*|\bарабск"),
    ("dutch", r"\bdutch\b|荷兰语|オランダ語|\bneerlandés\b|\bnéerlandais\b|\bniederländisch\w*|\bnederlands\b"),
    ("hindi", r"\bhindi\b|印地语|ヒンディー語|힌디어"),
    ("vietnamese", r"\bvietnamese\b|越南语|ベトナム語|베트남어|\btiếng việt\b"),
    ("thai", r"\bthai\b|泰语|泰文|タイ語|태국어"),
    ("indonesian", r"\bindonesian\b|印尼语|インドネシア語|인도네시아어|\bbahasa indonesia\b"),
    ("turkish", r"\bturkish\b|土耳其语|トルコ語|터키어|\btürkçe\b"),
    (
        "polish",
        r"\bpolish\b(?! (?:my|your|the|it|them|a)\b)|波兰语|ポーランド語|\bpolski\b|\bpolaco\b|\bpolonais\b",
    ),
)


# The parties of an exchange, each by its names; one for the other is another question ("Who pays for repairs, the
# landlord?" / "..., the tenant?"). A question naming both (one acting on the other) differs from none naming one of
# them; a swap of the two is `question_pairs.words_swapped`'s.
_ROLES: _Table = (
    (
        "landlord",
        r"\blandlords?\b|\bproperty owners?\b|房东|房東|业主|業主|大家さん|貸主|집주인|임대인|\bpropietari[oa]s?\b"
        r"|\barrendador(?:es)?\b|\bvermieter\w*|\bpropriétaires?\b|\bbailleurs?\b|\bproprietári[oa]s?\b",
    ),
    (
        "tenant",
        r"\b(?:tenants?|renters?)\b|租客|租户|租戶|房客|承租人|借主|入居者|세입자|임차인|\binquilin[oa]s?\b"
        r"|\barrendatari[oa]s?\b|(?<!ver)\bmieter\w*|\blocataires?\b|\blocatári[oa]s?\b",
    ),
    (
        "driver",
        r"\bdrivers?\b|司机|司機|運転手|ドライバー|기사님?|운전자|\bconductor(?:es)?\b|\bchofer(?:es)?\b|\bfahrer\w*"
        r"|\bchauffeurs?\b|\bmotoristas?\b",
    ),
    (
        "passenger",
        r"\b(?:passengers?|riders?)\b|乘客|乗客|승객|\bpasajer[oa]s?\b|\bfahrgast\w*|\bfahrgäste\w*|\bpassagers?\b"
        r"|\bpassageir[oa]s?\b",
    ),
    ("host", r"\bhosts?\b|房主|ホスト|호스트|\banfitri[óo]n(?:es)?\b|\bgastgeber\w*|\bhôtes?\b|\banfitriões\b"),
    ("guest", r"\bguests?\b|房客|ゲスト|게스트|\bhu[ée]sped(?:es)?\b|\bgäste?\b|\binvités?\b|\bhóspedes?\b"),
    (
        "employer",
        r"\bemployers?\b|雇主|用人单位|用人單位|雇用主|고용주|\bempleador(?:es)?\b|\barbeitgeber\w*|\bemployeurs?\b"
        r"|\bempregador(?:es)?\b",
    ),
    (
        "employee",
        r"\bemployees?\b|员工|員工|雇员|雇員|职工|職工|従業員|직원|\bemplead[oa]s?\b|\barbeitnehmer\w*|\bsalariée?s?\b"
        r"|\bemployée?s?\b|\bempregad[oa]s?\b|\bfuncionári[oa]s?\b",
    ),
    (
        "doctor",
        r"\b(?:doctors?|physicians?)\b|医生|醫生|大夫|医師|医者|의사|\bmédic[oa]s?\b|\barzt\b|\bärzt\w*|\bmédecins?\b",
    ),
    ("patient", r"\bpatients?\b|患者|病人|환자|\bpacientes?\b|\bpatient(?:en|in)?\b"),
    (
        "teacher",
        r"\b(?:teachers?|instructors?)\b|老师|老師|教师|教師|先生|선생님|교사|\bprofesor(?:es|as?)?\b|\blehrer\w*"
        r"|\benseignants?\b|\bprofesseurs?\b",
    ),
    (
        "student",
        r"\b(?:students?|pupils?|learners?)\b|学生|學生|生徒|학생|\balumn[oa]s?\b|\bestudiantes?\b|\bschüler\w*"
        r"|\bélèves?\b|\bétudiants?\b|\balun[oa]s?\b",
    ),
    ("parent", r"\bparents?\b|家长|家長|父母|保護者|부모|\bpadres\b|\beltern\b|\bpais\b"),
    (
        "child",
        r"\b(?:child|children|kids?)\b|孩子|小孩|子女|子供|子ども|자녀|\bhij[oa]s\b|\bkinder\b|\benfants?\b|\bfilhos\b",
    ),
)


# Who a product, price or rule is for, each scale a table of its own: women or men, children, adults or seniors,
# full-time or part-time workers. "Do you have rain jackets for women?" / "... for men?", "儿童需要买票吗" /
# "老人需要买票吗" and "Can part-time staff join the pension plan?" / "... full-time staff ..." sit as close as a
# rewording. Words inside others are kept out: 女儿 (a daughter), 美女 (a form of address), 아이디 (an ID), Korean
# 경로 (also "a route"), German "Frau" and "Mann" (Ms. and a name), English "kind".
_GENDERS: _Table = (
    (
        "men",
        (
            r"\b(?:men|man|men's|mens|male|males|gentlemen)\b|男士|男性|男装|男裝|男款|男式|男生|男人|男鞋|男用|男子|男孩",
            r"男朋友|男友|メンズ|紳士|남성|남자|\bhombres?\b|\bcaballeros?\b|\bmasculin[oae]s?\b|\bherren\w*",
            r"\bmänner\w*|\bmännlich\w*|\bhommes?\b|\bmasculine?s?\b|\bhomens?\b|\buomini\b|\buomo\b",
        ),
    ),
    (
        "women",
        (
            r"\b(?:women|woman|women's|womens|female|females|ladies|lady|ladies')\b|女士|女性|女装|女裝|女款|女式|女生|女人",
            r"女鞋|女用|女子|女孩|女朋友|女友|レディース|婦人|여성|여자|\bmujer(?:es)?\b|\bdamas?\b|\bfemenin[oa]s?\b",
            r"\bdamen\w*|\bfrauen\w*|\bweiblich\w*|\bfemmes?\b|\bféminine?s?\b|\bmulher(?:es)?\b|\bdonn[ae]\b",
        ),
    ),
)
_AGES: _Table = (
    (
        "child",
        (
            r"\b(?:child|children|kids?|child's|children's|kids')\b|儿童|兒童|小孩|孩子|小朋友|童票|子供|子ども|こども|キッズ",
            r"小児|어린이|아동|키즈|\bniñ[oa]s?\b|\binfantil(?:es)?\b|\bkinder(?:n|karte|ticket|preis)?\b",
            r"\benfants?\b|\bcrianças?\b|\bbambin[oi]\b",
        ),
    ),
    ("adult", r"\badults?\b|成人|成年人|大人|어른|성인|\badult[oa]s?\b|\berwachsene\w*|\badultes?\b"),
    (
        "senior",
        (
            r"\b(?:seniors?|elderly|pensioners?|retirees?)\b|老人|老年人|长者|長者|シニア|高齢者|노인|어르신",
            r"\bjubilad[oa]s?\b|\bpersonas mayores\b|\bsenioren\b|\brentner\w*|\bretraités?\b|\bidosos?\b",
        ),
    ),
)
_WORK_HOURS: _Table = (
    (
        "full-time",
        r"\bfull[- ]?time\b|全职|全職|正社員|フルタイム|정규직|풀타임|\btiempo completo\b|\bjornada completa\b"
        r"|\bvollzeit\w*|\btemps plein\b|\btempo integral\b",
    ),
    (
        "part-time",
        r"\bpart[- ]?time\b|兼职|兼職|小时工|小時工|アルバイト|パートタイム|パート(?!ナー)|아르바이트|알바|파트타임"
        r"|\bmedio tiempo\b|\bmedia jornada\b|\btiempo parcial\b|\bteilzeit\w*|\btemps partiel\b|\bmeio período\b",
    ),
)
# The part of the day a question asks about: "Can I pick up my order in the morning?" / "... in the evening?". The
# evening and the night are one (users write either of opening hours); Spanish "mañana" alone is tomorrow, read only
# after "por la"; Japanese 朝 only before a particle, as Chinese writes it for "facing" (朝南).
_PARTS_OF_DAY: _Table = (
    (
        "morning",
        r"\bmornings?\b|早上|早晨|上午|清晨|朝(?=[のにはからも])|毎朝|今朝|午前|오전|아침|\bpor la mañana\b"
        r"|\bmatin(?:ée)?s?\b|\bvormittags?\b|\bmorgens\b|\bde manhã\b",
    ),
    ("afternoon", r"\bafternoons?\b|下午|午後|오후|\bpor la tarde\b|\baprès-midi\b|\bnachmittags?\b|\bà tarde\b"),
    (
        "evening",
        r"\b(?:evenings?|nights?|tonight|overnight)\b|晚上|傍晚|夜里|夜裡|夜间|夜間|深夜|夕方|夜(?!中)|저녁|밤"
        r"|\bpor la noche\b|\bsoir(?:ée)?s?\b|\bnuit\b|\babends\b|\bnachts\b|\bà noite\b",
    ),
)

# The season a question asks about ("Are the summer opening hours online?" / "... winter ..."). Left out: English
# "fall" (a drop), "spring" alone stays (a coil is rarely asked beside a season), 春节 (a holiday), a bare 夏 or 冬 in
# Chinese (names, 冬瓜), French "été" after "a" (has been), Italian "estate" (English real estate).
_SEASONS: _Table = (
    (
        "spring",
        r"\bspring\b|春季|春天|春装|春裝|春休み|봄|\bprimavera\b|\bfrühling\w*|\bprintemps\b",
    ),
    (
        "summer",
        r"\bsummer\b|夏季|夏天|夏装|夏裝|暑假|夏休み|夏場|여름|\bverano\b|\bverão\b|\bsommer\w*"
        r"|\b(?:d'|l'|en |cet )été\b",
    ),
    ("autumn", r"\bautumn\b|秋季|秋天|秋装|秋裝|秋休み|가을|\botoño\b|\boutono\b|\bherbst\w*|\bautomne\b"),
    (
        "winter",
        r"\bwinter\w*|冬季|冬天|冬装|冬裝|寒假|冬休み|冬場|겨울|\binvierno\b|\binverno\b|\b(?:d'|l'|en |cet )hiver\b",
    ),
)
# Clothing and portion sizes by name: "Do you have these jeans in a small?" / "... in a large?", 小号 / 大号, Mサイズ /
# Lサイズ, Größe S / L. A lone letter counts only beside a word for size; "big" stays out ("How big is the room?"), and
# so do the other languages' everyday adjectives (klein, grande, pequeño).
_SIZES: _Table = (
    (
        "small",
        r"\bsmall\b|小号|小號|小码|小碼|\bsサイズ|\bs サイズ|スモール|스몰|\b(?:size|größe|talla|taille|taglia) s\b",
    ),
    (
        "medium",
        r"\bmedium\b|中号|中號|中码|中碼|\bmサイズ|\bm サイズ|ミディアム|미디엄"
        r"|\b(?:size|größe|talla|taille|taglia) m\b",
    ),
    (
        "large",
        r"\blarge\b|大号|大號|大码|大碼|\blサイズ|\bl サイズ|ラージ|라지|\b(?:size|größe|talla|taille|taglia) l\b",
    ),
    ("extra large", r"\bextra[- ]large\b|\bxl\b|加大号|加大碼|加大码|\bxlサイズ|\bxl サイズ"),
)


# The side of a place by the compass ("Is the east entrance step-free?" / "... west ..."): the words, and in Chinese,
# Japanese and Korean the compounds that name a gate, an exit or a side (北门, 東口, 북쪽); a bare 东 or 西 writes
# "thing" (东西) and the names of cities and provinces (北京, 山东). Left out: French "est" (is) and "sur" (on),
# Spanish "este" (this), and so Spanish "sur" too.
_COMPASS: _Table = (
    (
        "north",
        r"\bnorth(?:ern)?\b|北门|北門|北边|北邊|北侧|北側|北口|北区|北區|북쪽|북문|\bnorte\b|\bnord(?:en)?\b",
    ),
    (
        "south",
        r"\bsouth(?:ern)?\b|南门|南門|南边|南邊|南侧|南側|南口|南区|南區|남쪽|남문|\bsüd(?:en)?\b|\bsud\b",
    ),
    ("east", r"\beast(?:ern)?\b|东门|東門|东边|東邊|东侧|東側|东口|東口|东区|東區|동쪽|동문|\bost(?:en)?\b"),
    (
        "west",
        r"\bwest(?:ern)?\b|西门|西門|西边|西邊|西侧|西側|西口|西区|西區|서쪽|서문|\boeste\b|\bouest\b|\bwesten\b",
    ),
)


_SPECIAL = set("\\()[]{}?*+.|^$")


def _structure(pattern: str, start: int = 0):  # noqa: ANN202 - a generator of (index, char, depth)
    """Each character of `pattern` from `start` that stands outside an escape and a character class, with the group
    depth after it: what `_top_level` and `_group_end` both walk."""
    depth, index, in_class = 0, start, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        else:
            depth += (char == "(") - (char == ")")
            yield index, char, depth
        index += 1


def _top_level(pattern: str, separator: str = "|") -> list[str]:
    """`pattern` cut at `separator` where it stands outside any group or class."""
    parts, start = [], 0
    for index, char, depth in _structure(pattern):
        if char == separator and depth == 0:
            parts.append(pattern[start:index])
            start = index + 1
    parts.append(pattern[start:])
    return parts


def _group_end(pattern: str, start: int) -> int:
    """The index just after the group opening at `start`."""
    for index, char, depth in _structure(pattern, start):
        if char == ")" and depth == 0:
            return index + 1
    raise ValueError(f"unbalanced group in {pattern!r}")


def _leading_literals(alternative: str) -> frozenset[str] | None:
    """Literal strings one of which every match of `alternative` begins with (its word boundaries and lookarounds
    before them set aside), or None when it begins with anything else (a class, an escape, an optional letter)."""
    rest = alternative
    while True:
        if rest.startswith("\\b"):
            rest = rest[2:]
        elif rest.startswith(("(?<!", "(?<=", "(?!", "(?=")):
            rest = rest[_group_end(rest, 0) :]
        else:
            break
    if rest.startswith("(?:"):
        end = _group_end(rest, 0)
        if end < len(rest) and rest[end] in "?*{":
            return None
        options = [_leading_literals(option) for option in _top_level(rest[3 : end - 1])]
        if any(option is None for option in options):
            return None
        return frozenset().union(*options)  # type: ignore[arg-type]
    literal = ""
    for char in rest:
        if char in _SPECIAL:
            if char in "?*{" and literal:
                literal = literal[:-1]  # the letter before is optional
            break
        literal += char
    # One letter of a Latin script begins too many words to rule a question out; one CJK character is a word.
    return frozenset({literal}) if len(literal) > 1 or (literal and not literal.isascii()) else None


class Kinds:
    """Reads which of a table's kinds a question names, and how often: each kind one pattern, its alternatives joined,
    matched on the lower-cased text. Every alternative begins with literal text, so one search for any of those
    beginnings (a plain alternation, which the regular-expression engine scans fast) rules out most questions, and
    only the kinds whose beginnings a question holds are matched in full."""

    def __init__(self, table: _Table):
        kinds = [(name, (spelled,) if isinstance(spelled, str) else spelled) for name, spelled in table]
        self._patterns = tuple((name, re.compile("|".join(alternatives))) for name, alternatives in kinds)
        self._beginnings: list[frozenset[str]] = []
        for name, alternatives in kinds:
            leads = [_leading_literals(part) for alternative in alternatives for part in _top_level(alternative)]
            if any(lead is None for lead in leads):
                raise ValueError(f"an alternative of {name!r} does not begin with literal text")
            self._beginnings.append(frozenset().union(*leads))  # type: ignore[arg-type]
        everything = sorted(set().union(*self._beginnings), key=len, reverse=True)
        self._screen = re.compile("|".join(map(re.escape, everything)))
        self.named = lru_cache(maxsize=_TEXTS_KEPT)(self._named)

    def _named(self, text: str) -> Counter[str]:
        lowered = text.lower()
        if not self._screen.search(lowered):
            return Counter()
        counts: Counter[str] = Counter()
        for (name, pattern), beginnings in zip(self._patterns, self._beginnings, strict=True):
            if any(beginning in lowered for beginning in beginnings) and (n := len(pattern.findall(lowered))):
                counts[name] = n
        return counts

    def differ(self, first: str, second: str) -> bool:
        """Whether each question names a kind, or a kind once more, that the other does not: "Basic" / "Pro", and
        "order today, arrive tomorrow" / "order today, arrive today". A question naming two kinds shares both with a
        question naming the same two, and the one it names with a question naming only that one."""
        one, other = self.named(first), self.named(second)
        return bool(one - other) and bool(other - one)


# Periods of time in the forms Chinese, Japanese and Korean questions write a rate or a term with ("每月", "按小时",
# "包年", "月卡", "年费", "月額", "毎週", "월간", "매년"), by the names `question_pairs.periods_differ` reads in order.
# Only forms that say "per" or "by the": a bare 天, 月 or 年 is a count's unit or a date ("三天", "3月"), which the
# numbers and dates checks read, and 月 / 월 alone also write Monday. "Monthly" / "annually" in English and the
# Romance and Germanic languages are read as words (`question_pairs._PERIODS`, `other_languages.PERIOD_TERMS`).
_CJK_PERIODS: _Table = (
    ("hour", r"每(?:个|個)?小(?:时|時)|按小(?:时|時)|(?:时|時)租|钟点|鐘點|毎時|時間あたり|時給|시간당|매시간"),
    ("day", r"每天|每日|按天|按日|日租|日卡|日票|日額|日払い|毎日|하루당|매일|일일 ?(?:요금|이용권)"),
    (
        "week",
        r"每周|每週|每(?:个|個)?星期|按周|按週|周卡|週卡|周票|週票|毎週|週ごと|週払い|週額|매주|주간|주당",
    ),
    (
        "month",
        (
            r"每(?:个|個)?月|按月|月付|包月|月费|月費|月卡|月票|月租|月度|月供|月缴|月繳|月会员|月會員",
            r"毎月|月額|月払い|月会費|月ごと|月々|매달|매월|월간|월정액|월별|월 ?(?:구독|요금|이용료|결제|납부|회비)",
        ),
    ),
    (
        "year",
        (
            r"每年|每一年|按年|年付|包年|年费|年費|年会费|年會費|年卡|年票|年租|年度|年缴|年繳|年会员|年會員",
            r"毎年|年額|年払い|年会費|年ごと|매년|연간|연회비|연 ?(?:구독|요금|이용료|결제|납부|회비)",
        ),
    ),
)

TIERS = Kinds(_TIERS)
STATES = Kinds(_STATES)
DATES = Kinds(_DATES)
RELATIVE_DATES = (Kinds(_RELATIVE_DAYS), Kinds(_RELATIVE_WEEKS), Kinds(_RELATIVE_MONTHS), Kinds(_EVENT_DAYS))
ROLES = Kinds(_ROLES)
LANGUAGES = Kinds(_LANGUAGES)
CJK_PERIODS = Kinds(_CJK_PERIODS)
GROUPS = (Kinds(_GENDERS), Kinds(_AGES), Kinds(_WORK_HOURS))
PARTS_OF_DAY = Kinds(_PARTS_OF_DAY)
SEASONS = Kinds(_SEASONS)
SIZES = Kinds(_SIZES)
COMPASS = Kinds(_COMPASS)
