"""Mock Gmail (v1 REST shape): messages, threads, drafts, labels, attachments, history."""
