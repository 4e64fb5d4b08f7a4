select example_id, question, question_en, sql_text
from {{ source('meta', 'sql_examples') }}
