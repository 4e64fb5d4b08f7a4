"""The IT department's query-ticket log (clinician request + the SQL IT wrote), one set per month."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

import numpy as np

from evalpkg.prod.catalog import departments, drugs

# (request template, SQL template); {d}=dept name, {k}=dept code, {y}/{m}=year/month, etc.
TEMPLATES: list[tuple[str, str]] = [
    (
        "麻烦统计一下{d}{y}年{m}月出院的患者人数",
        "select count(distinct patient_id) from t_zy_visit where visit_type = 'ZY' and ksdm = '{k}' "
        "and cyrq >= '{start}' and cyrq < '{end}'",
    ),
    (
        "{d}{y}年{m}月门诊量是多少",
        "select count(*) from t_zy_visit where visit_type = 'MZ' and ksdm = '{k}' "
        "and ryrq >= '{start}' and ryrq < '{end}'",
    ),
    (
        "想看下糖化血红蛋白高于{t}%的患者有多少人",
        "select count(distinct patient_id) from t_lab_result where xmdm = 'HBA1C' and bgzt = 'F' "
        "and result_value > {t}",
    ),
    (
        "最近半年用过{drug}的患者人数，作废的医嘱不算",
        "select count(distinct patient_id) from t_med_order where ypdm = '{ypdm}' and zfbz = 0 "
        "and kssj >= '{half_year_ago}'",
    ),
    (
        "{d}{y}年平均住院天数",
        "select round(avg(zyts), 1) from t_zy_visit where visit_type = 'ZY' and ksdm = '{k}' "
        "and cyrq >= '{y}-01-01' and cyrq < '{y1}-01-01'",
    ),
    (
        "房颤患者里没有开抗凝药的有多少",
        "select count(distinct d.patient_id) from t_diag_record d where d.icd10_code like 'I48%' "
        "and not exists (select 1 from t_med_order o join dict_drug g on g.ypdm = o.ypdm "
        "where o.patient_id = d.patient_id and g.ypfl = '抗凝药' and o.zfbz = 0)",
    ),
    (
        "空腹血糖超过{g}mmol/L的患者数(老数据是mg/dL注意换算)",
        "select count(distinct patient_id) from t_lab_result where xmdm = 'GLU' and bgzt = 'F' and "
        "(case when unit = 'mg/dL' then result_value / 18.0 else result_value end) > {g}",
    ),
    (
        "{y}年每个月{d}的住院人次",
        "select date_trunc('month', ryrq) as mon, count(*) from t_zy_visit where visit_type = 'ZY' "
        "and ksdm = '{k}' and ryrq >= '{y}-01-01' and ryrq < '{y1}-01-01' group by 1 order by 1",
    ),
]
# Tickets about a named patient exist in production and must never reach the eval DB.
PATIENT_TEMPLATE = (
    "查一下患者{name}(病案号{pid})近一年的检验结果",
    "select * from t_lab_result where patient_id = '{pid}' and cysj >= '{year_ago}'",
)


@dataclass
class Ticket:
    ticket_id: int
    created_at: datetime
    ksdm: str
    requester: str
    request_text: str
    sql_text: str
    status: str


def _month_starts(first: date, last: date) -> list[date]:
    out, cur = [], first.replace(day=1)
    while cur <= last:
        out.append(cur)
        cur = (cur.replace(day=28) + timedelta(days=4)).replace(day=1)
    return out


def generate_tickets(
    rng: np.random.Generator, as_of: date, per_month: int, patients: list[tuple[str, str]]
) -> list[Ticket]:
    depts = [d for d in departments() if d["weight"] > 0]
    drug_list = list(drugs().values())
    tickets: list[Ticket] = []
    for month in _month_starts(date(as_of.year - 2, 1, 1), as_of):
        for _ in range(per_month):
            created = datetime.combine(month, datetime.min.time()) + timedelta(
                days=int(rng.integers(0, 28)), hours=float(rng.uniform(8, 18))
            )
            if created.date() > as_of:
                continue
            dept = depts[int(rng.integers(len(depts)))]
            prev = (month - timedelta(days=1)).replace(day=1)
            if rng.random() < 0.05 and patients:
                name, pid = patients[int(rng.integers(len(patients)))]
                request, sql = PATIENT_TEMPLATE
            else:
                name, pid = "", ""
                request, sql = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
            drug = drug_list[int(rng.integers(len(drug_list)))]
            params = {
                "d": dept["ksmc"],
                "k": dept["ksdm"],
                "y": prev.year,
                "y1": prev.year + 1,
                "m": prev.month,
                "start": prev.isoformat(),
                "end": month.isoformat(),
                "t": float(rng.choice([6.5, 7.0, 7.5, 8.0, 9.0])),
                "g": float(rng.choice([7.0, 7.8, 11.1])),
                "drug": drug["ypmc"],
                "ypdm": drug["ypdm"],
                "half_year_ago": (created.date() - timedelta(days=182)).isoformat(),
                "year_ago": (created.date() - timedelta(days=365)).isoformat(),
                "name": name,
                "pid": pid,
            }
            tickets.append(
                Ticket(
                    ticket_id=len(tickets) + 1,
                    created_at=created,
                    ksdm=dept["ksdm"],
                    requester=f"D{int(rng.integers(1000, 9999))}",
                    request_text=request.format(**params),
                    sql_text=sql.format(**params),
                    status="done" if rng.random() < 0.93 else "rejected",
                )
            )
    return tickets
