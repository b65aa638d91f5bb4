"""The fault suite: test hosts, nemeses, histories, the checker and its reports."""
