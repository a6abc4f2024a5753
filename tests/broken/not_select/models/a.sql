-- models are SELECTs only
insert into other.t
select 1 as x
