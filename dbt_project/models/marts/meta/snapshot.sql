-- One row: which snapshot agents query and the pinned "now" that "last 3 months" refers to.
-- The version is a content fingerprint, so an unchanged re-sync keeps the same version. The key takes
-- part (an HMAC of a constant, which tells nothing of the key): another key shifts every date and renames
-- every patient, so it is another snapshot, and a run planned on one is not executed on the other.
with counts as (
    select
        (select count(*) from {{ ref('t_patient_info') }}) as n_patients,
        (select count(*) from {{ ref('t_zy_visit') }}) as n_visits,
        (select count(*) from {{ ref('t_diag_record') }}) as n_diagnoses,
        (select count(*) from {{ ref('t_lab_result') }}) as n_lab_results,
        (select count(*) from {{ ref('t_med_order') }}) as n_med_orders
),

info as (
    select as_of, seed, patients, generator_version from {{ source('meta', 'his_info') }}
)

select
    'eval-' || to_char(info.as_of, 'YYYYMMDD') || '-' || left(md5(concat_ws('|',
        info.as_of, info.seed, info.patients, info.generator_version, counts.n_patients,
        counts.n_visits, counts.n_diagnoses, counts.n_lab_results, counts.n_med_orders,
        {{ keyed_hash('snapshot', "'version'") }}
    )), 8) as snapshot_version,
    {{ snapshot_now() }} as pinned_now,
    info.as_of as pinned_date,
    counts.*
from info
cross join counts
