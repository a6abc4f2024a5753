select x from {{ ref('nope') }}
