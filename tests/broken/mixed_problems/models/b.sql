select {{ oops }} as x
