"""Episodes: the loop, its policies, persistence, scoring, reports."""
