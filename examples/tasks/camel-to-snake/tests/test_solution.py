from solution import fn


def test_simple_camel():
    assert fn("getValue") == "get_value"
    assert fn("PascalCaseName") == "pascal_case_name"


def test_acronyms():
    assert fn("HTTPServer") == "http_server"
    assert fn("getHTTPResponseCode") == "get_http_response_code"
    assert fn("ABC") == "abc"


def test_digits_and_existing_snake():
    assert fn("version2Update") == "version2_update"
    assert fn("already_snake_case") == "already_snake_case"


def test_empty():
    assert fn("") == ""
