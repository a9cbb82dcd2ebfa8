"""World lifecycle: create, reset, snapshot, restore, fork, delete, export, clock."""
