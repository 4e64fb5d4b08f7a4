{#
  The largest table, so incremental: only prod rows changed since the last watermark cross the
  link (the bounds are literals so postgres_fdw pushes them down). The watermark lives in a
  sync-only table, not in this table: an unshifted prod timestamp per row would undo the shift.
  Rows deleted or soft-deleted in prod are removed after every run. A moved snapshot "now" rebuilds
  the table (pending reports are released, later tests come in, earlier ones may leave), as does a
  production generated anew.
#}
{{ config(
    materialized='incremental',
    unique_key='lab_id',
    incremental_strategy='delete+insert',
    on_schema_change='fail',
    pre_hook="{% if is_incremental() and snapshot_changed('t_lab_result') %}delete from {{ this }}{% endif %}",
    post_hook=[
        "delete from {{ this }} t where not exists (select 1 from {{ source('his', 't_lab_result') }} s where s.lab_id = t.lab_id and s.is_deleted = 0)",
        "{{ promote_watermark('t_lab_result') }}",
        "{{ promote_watermark('t_lab_result@now') }}",
        "{{ promote_watermark('t_lab_result@generated') }}",
    ],
) }}

{% set bounds = watermark_bounds('t_lab_result', source('his', 't_lab_result')) %}
{% set rebuilt = snapshot_changed('t_lab_result') %}

select
    lab_id, visit_id, patient_id, xmdm, xmmc, result_value, unit, ref_range, result_flag, bgzt, bz,
    cysj, exec_time, report_time
from {{ ref('stg_his__lab_results') }}
where src_update_time <= '{{ bounds.high }}'
{% if is_incremental() and bounds.low and not rebuilt %}
  and src_update_time > '{{ bounds.low }}'
{% endif %}
