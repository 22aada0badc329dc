"""A Flask sign-up that stages its welcome e-mail in its SQLAlchemy transaction."""
