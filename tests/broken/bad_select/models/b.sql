select x from {{ ref('a') }}
