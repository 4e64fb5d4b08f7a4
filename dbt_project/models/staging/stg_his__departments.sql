select ksdm, ksmc, ksmc_en, sjksdm, sjksmc, lcks_bz, ty_bz, tyrq
from {{ source('his', 'dict_dept') }}
