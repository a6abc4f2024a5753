select * from raw.events
