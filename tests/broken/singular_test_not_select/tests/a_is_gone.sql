-- a singular test is a SELECT of the failing rows; this one would drop the table
drop table {{ ref('a') }}
