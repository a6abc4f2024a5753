select x

from {{ ref('nope_two') }}
