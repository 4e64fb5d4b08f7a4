select * from {{ ref('stg_his__lab_items') }}
