-- Tickets about one named patient never leave production.
select ticket_id, created_at, ksdm, request_text, sql_text, status
from {{ source('ops', 'query_ticket') }}
where sql_text !~* '(patient_id|visit_id)\s*(=|in)\s*\(?\s*''|brxm|sfzh|lxdh|jtzz'
  and request_text !~ '病案号|身份证|电话|住址'
