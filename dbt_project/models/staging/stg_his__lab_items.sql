select xmdm, xmmc, xmmc_en, dw, ckz_low, ckz_high, bbzl
from {{ source('his', 'dict_lab_item') }}
