"""A Django sign-up that stages its welcome e-mail inside `transaction.atomic()`."""
