select
  {{ colums }} as x
from t
