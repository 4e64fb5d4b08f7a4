select * from {{ ref('stg_ops__query_tickets') }}
