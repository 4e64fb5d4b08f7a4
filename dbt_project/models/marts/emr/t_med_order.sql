select * from {{ ref('stg_his__med_orders') }}
