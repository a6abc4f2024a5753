select {{ cents('1') }} as x
