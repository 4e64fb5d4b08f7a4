select * from {{ ref('stg_his__patients') }}
