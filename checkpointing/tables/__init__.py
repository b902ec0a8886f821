"""Table formats: outputs committed once per completed epoch, upstream tables read as
incremental inputs (PROTOCOL 6.12-6.14).
"""
