"""How the server delivers: attempts in flight at once, over pooled connections."""
