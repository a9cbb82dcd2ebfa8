"""Submission-loop tasks (K3 report §4.2.6): a public diagnostic verifier the agent may call,
a hidden verifier on unseen cases that decides the reward, and a submission budget."""
