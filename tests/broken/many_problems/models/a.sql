select x
from {{ ref('nope_one') }}
