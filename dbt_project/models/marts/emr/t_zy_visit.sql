select * from {{ ref('stg_his__visits') }}
