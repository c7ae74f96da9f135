def text_columns(
    result: int, rows: int, width: int, fields: tuple[int, ...],
    getvalue: int, getlength: int, getisnull: int,
) -> list[tuple[int, bytes | None, bytes, bytes]]: ...
