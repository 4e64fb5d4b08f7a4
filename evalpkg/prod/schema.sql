-- Simulated production HIS schema (legacy naming on purpose: pinyin abbreviations, code fields,
-- several time columns per fact, soft-delete flags). Recreated from scratch by `prod generate`.
drop schema if exists his cascade;
drop schema if exists meta cascade;
drop schema if exists ops cascade;
create schema his;
create schema meta;
create schema ops;

create table his.dict_dept (
    ksdm        varchar(8) primary key,  -- 科室代码
    ksmc        varchar(64) not null,    -- 科室名称
    ksmc_en     varchar(64),
    sjksdm      varchar(8),              -- 上级科室(系统)代码
    sjksmc      varchar(32),
    lcks_bz     smallint not null,       -- 临床科室标志 1=是 0=否
    ty_bz       smallint not null,       -- 停用标志 1=停用
    tyrq        date,                    -- 停用日期
    update_time timestamp not null
);

create table his.dict_lab_item (
    xmdm varchar(16) primary key, xmmc varchar(64) not null, xmmc_en varchar(64),
    dw varchar(16), ckz_low numeric, ckz_high numeric, bbzl varchar(16),
    update_time timestamp not null
);

create table his.dict_drug (
    ypdm varchar(16) primary key, ypmc varchar(64) not null, ypmc_en varchar(64),
    atc_code varchar(16), ypfl varchar(32), update_time timestamp not null
);

create table his.t_patient_info (
    patient_id  varchar(12) primary key,  -- 患者ID(病案号)
    brxm        varchar(32) not null,     -- 病人姓名
    sfzh        varchar(18),              -- 身份证号
    lxdh        varchar(16),              -- 联系电话
    jtzz        varchar(128),             -- 家庭住址
    csrq        date not null,            -- 出生日期
    xb          smallint not null,        -- 性别 GB/T 2261.1: 0未知 1男 2女 9未说明
    hyzk        smallint,                 -- 婚姻状况 10未婚 20已婚 30丧偶 40离婚 90未说明
    jdrq        timestamp not null,       -- 建档日期
    update_time timestamp not null,
    is_deleted  smallint not null default 0
);

create table his.t_zy_visit (
    visit_id    varchar(16) primary key,  -- 就诊流水号
    patient_id  varchar(12) not null,
    visit_type  char(2) not null,         -- MZ 门诊 / ZY 住院
    ksdm        varchar(8) not null,
    ghrq        timestamp not null,       -- 挂号/登记时间
    ryrq        timestamp not null,       -- 入院(就诊)时间
    cyrq        timestamp,                -- 出院时间, NULL=在院
    zyts        integer,                  -- 住院天数(出院结算时写入), 门诊为NULL
    cyfs        smallint,                 -- 离院方式 1医嘱离院 2医嘱转院 4非医嘱离院 5死亡 9其他
    update_time timestamp not null,
    is_deleted  smallint not null default 0
);

create table his.t_diag_record (
    diag_id     bigint primary key,
    visit_id    varchar(16) not null,
    patient_id  varchar(12) not null,
    icd10_code  varchar(16) not null,
    zdmc        varchar(128) not null,    -- 诊断名称(医生自由录入)
    zdlx        smallint not null,        -- 诊断类型 1主要诊断 2次要诊断
    zdsj        timestamp not null,       -- 诊断时间
    update_time timestamp not null,
    is_deleted  smallint not null default 0
);

create table his.t_lab_result (
    lab_id       bigint primary key,
    visit_id     varchar(16) not null,
    patient_id   varchar(12) not null,
    xmdm         varchar(16) not null,
    xmmc         varchar(64) not null,
    result_value numeric(12, 3),          -- NULL = 检验已做但无结果(见bz)
    unit         varchar(16),
    ref_range    varchar(32),
    result_flag  char(1),                 -- H偏高 L偏低 N正常, NULL=无结果
    bgzt         char(1) not null,        -- 报告状态 F终审 C作废
    bz           varchar(64),             -- 备注, 如"标本溶血"
    cysj         timestamp not null,      -- 采样时间
    exec_time    timestamp not null,      -- 检验执行(上机)时间
    report_time  timestamp,               -- 报告时间, NULL=未出报告
    update_time  timestamp not null,
    is_deleted   smallint not null default 0
);

create table his.t_med_order (
    order_id    bigint primary key,
    visit_id    varchar(16) not null,
    patient_id  varchar(12) not null,
    ypdm        varchar(16) not null,
    ypmc        varchar(64) not null,
    jl          numeric(10, 2) not null,  -- 剂量
    jldw        varchar(8) not null,      -- 剂量单位
    pc          varchar(8) not null,      -- 频次 qd bid tid qn prn
    gytj        varchar(16) not null,     -- 给药途径
    yzlx        smallint not null,        -- 医嘱类型 1长期 2临时
    kssj        timestamp not null,       -- 开始时间
    jssj        timestamp,                -- 停止时间, NULL=未停
    zfbz        smallint not null,        -- 作废标志 1=医嘱已作废(未执行)
    update_time timestamp not null,
    is_deleted  smallint not null default 0
);

create table meta.data_dictionary (
    table_name varchar(64) not null, column_name varchar(64) not null,
    meaning varchar(256) not null, meaning_en varchar(256), unit varchar(32),
    code_mapping varchar(256), null_meaning varchar(128), time_semantics varchar(128),
    primary key (table_name, column_name)
);

create table meta.sql_examples (
    example_id integer primary key, question varchar(256) not null,
    question_en varchar(256), sql_text text not null
);

create table ops.query_ticket (
    ticket_id   integer primary key,
    created_at  timestamp not null,
    ksdm        varchar(8) not null,       -- 提需求的科室
    requester   varchar(32) not null,      -- 需求人(医生工号)
    request_text varchar(512) not null,
    sql_text    text not null,
    status      varchar(8) not null        -- done / rejected
);

-- Provenance of this simulated database (the "now" the data was generated at).
create table meta.his_info (
    as_of date not null, seed integer not null, patients integer not null,
    generator_version varchar(16) not null, generated_at timestamp not null
);
