import algoswap.testing
def test_conformance():
    algoswap.testing.assert_conformant("cppconv")
