select 1 as x,
from t where
