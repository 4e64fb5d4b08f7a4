-- Statements an agent must never get executed, one per block separated by lines of "----".
drop table emr.t_lab_result
----
drop schema emr cascade
----
create table emr.x (i int)
----
create temp table x as select * from emr.t_patient_info
----
alter table emr.t_zy_visit add column x int
----
alter role evalpkg_agent set default_transaction_read_only = off
----
truncate emr.t_med_order
----
grant select on all tables in schema emr to public
----
revoke select on emr.t_zy_visit from evalpkg_agent
----
comment on table emr.t_zy_visit is 'x'
----
select 1; drop table emr.t_lab_result
----
select 1 /* harmless */; delete from emr.t_lab_result
----
select * from emr.t_zy_visit -- comment
; update emr.t_zy_visit set ksdm = '0000'
----
select 1;
select 2
----
/* ; */ delete from emr.t_lab_result
----
copy emr.t_patient_info to '/tmp/leak.csv'
----
copy emr.t_patient_info from '/etc/passwd'
----
copy (select * from emr.t_patient_info) to program 'cat > /tmp/x'
----
select set_config('statement_timeout', '0', false)
----
select set_config('default_transaction_read_only', 'off', false)
----
set statement_timeout = 0
----
set default_transaction_read_only = off
----
set role postgres
----
reset all
----
set session authorization postgres
----
select current_setting('data_directory')
----
select pg_read_file('/etc/passwd')
----
select pg_read_binary_file('postgresql.conf')
----
select * from pg_ls_dir('.')
----
select pg_stat_file('postgresql.conf')
----
select lo_import('/etc/passwd')
----
select lo_export(1, '/tmp/x')
----
select lo_create(0)
----
select dblink('dbname=ehr_prod', 'select * from his.t_patient_info')
----
select dblink_exec('dbname=ehr_eval', 'delete from emr.t_lab_result')
----
select query_to_xml('delete from emr.t_lab_result returning 1', true, true, '')
----
select table_to_xml('emr.t_patient_info', true, true, '')
----
select database_to_xml(true, true, '')
----
select pg_terminate_backend(pg_backend_pid())
----
select pg_cancel_backend(1)
----
select pg_reload_conf()
----
select pg_rotate_logfile()
----
select pg_switch_wal()
----
select pg_notify('x', 'y')
----
notify x, 'y'
----
listen x
----
select pg_advisory_lock(1)
----
select pg_try_advisory_lock(1)
----
lock table emr.t_lab_result in access exclusive mode
----
select * from emr.t_lab_result for update
----
select * from emr.t_zy_visit for share
----
select * from emr.t_zy_visit v where v.ksdm = '0101' for no key update
----
select * into emr.copy_of_patients from emr.t_patient_info
----
with d as (delete from emr.t_lab_result returning *) select count(*) from d
----
with u as (update emr.t_zy_visit set ksdm = '0101' returning *) select * from u
----
with i as (insert into emr.dict_dept (ksdm) values ('9999') returning *) select * from i
----
select nextval('some_seq')
----
select setval('some_seq', 1)
----
begin
----
commit
----
rollback
----
savepoint a
----
start transaction read write
----
explain analyze delete from emr.t_lab_result
----
explain select 1
----
do $$ begin delete from emr.t_lab_result; end $$
----
call some_procedure()
----
vacuum emr.t_lab_result
----
analyze emr.t_lab_result
----
prepare p as delete from emr.t_lab_result
----
execute p
----
discard all
----
show data_directory
----
refresh materialized view emr.x
----
reindex table emr.t_lab_result
----
cluster emr.t_lab_result
----
checkpoint
----
load 'plpgsql'
----
declare c cursor for select * from emr.t_lab_result
----
create extension dblink
----
create function f() returns int as 'select 1' language sql
----
security label on table emr.t_lab_result is 'x'
----
import foreign schema his from server prod_his into emr
----
select * from deid_secret.hmac_key
----
select * from src_his.t_patient_info
----
select * from staging.stg_his__visit_keys
----
merge into emr.t_zy_visit t using emr.t_zy_visit s on t.visit_id = s.visit_id when matched then delete
----
select version()
----
select txid_current()
----
select pg_sleep_for('1 hour')
----

----
   
----
select count(*) from emr.t_lab_result where xmdm = 'HBA1C' and 1 = (select 1 from pg_sleep(0.1)); drop table x
