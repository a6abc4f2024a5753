select 1 as x
from {{ env_var('MVFLOW_TEST_SURELY_UNSET') }}.t
