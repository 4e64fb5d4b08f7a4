select ypdm, ypmc, ypmc_en, atc_code, ypfl
from {{ source('his', 'dict_drug') }}
