select x from {{ ref('b') }}
