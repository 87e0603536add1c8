"""The people of the desk: who they are, how they sign in, what their role lets them do."""
