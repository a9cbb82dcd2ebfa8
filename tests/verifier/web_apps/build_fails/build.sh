echo "compiling..."
echo "error: cannot find module ./missing" >&2
exit 1
