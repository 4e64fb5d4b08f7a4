-- Every non-deleted prod row has exactly one eval row (nothing lost, nothing duplicated).
{% set pairs = [
    ('t_patient_info', 'patient_id'), ('t_zy_visit', 'visit_id'), ('t_diag_record', 'diag_id'),
    ('t_lab_result', 'lab_id'), ('t_med_order', 'order_id')] %}
{% for table, key in pairs %}
select '{{ table }}' as table_name, prod.n as prod_rows, eval.n as eval_rows, eval.distinct_keys
from (select count(*) as n from {{ source('his', table) }} where is_deleted = 0) as prod
cross join (select count(*) as n, count(distinct {{ key }}) as distinct_keys from {{ ref(table) }}) as eval
where prod.n <> eval.n or eval.n <> eval.distinct_keys
{% if not loop.last %}union all{% endif %}
{% endfor %}
