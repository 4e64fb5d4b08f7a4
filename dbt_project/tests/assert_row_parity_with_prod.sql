-- Every non-deleted prod row that happened by the snapshot's "now" (its own time moved by its patient's
-- shift) has exactly one eval row, and no other row has one: nothing lost, nothing duplicated, nothing
-- from after "now". The shift is recomputed here from the prod patient id, not read from staging.
{% set tables = [
    ('t_patient_info', 'patient_id', 'jdrq'), ('t_zy_visit', 'visit_id', 'ryrq'),
    ('t_diag_record', 'diag_id', 'zdsj'), ('t_lab_result', 'lab_id', 'exec_time'),
    ('t_med_order', 'order_id', 'kssj')] %}
{% for table, key, happened in tables %}
select '{{ table }}' as table_name, prod.n as prod_rows, eval.n as eval_rows, eval.distinct_keys
from (
    select count(*) as n from {{ source('his', table) }}
    where is_deleted = 0 and {{ shift(happened, shift_days('patient_id')) }} <= {{ snapshot_now() }}
) as prod
cross join (select count(*) as n, count(distinct {{ key }}) as distinct_keys from {{ ref(table) }}) as eval
where prod.n <> eval.n or eval.n <> eval.distinct_keys
{% if not loop.last %}union all{% endif %}
{% endfor %}
