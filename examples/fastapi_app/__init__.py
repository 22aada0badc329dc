"""A FastAPI sign-up that stages its welcome e-mail in the request's transaction."""
