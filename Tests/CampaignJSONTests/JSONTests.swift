import Testing
import CampaignJSON

@Suite struct JSONTextTests {
    @Test func escapesWhatJSONRequiresAndNothingElse() {
        var out: [UInt8] = []
        JSONText.appendString(Array("a\"b\\c\nd\te\u{01}¡👋\u{7F}".utf8), to: &out)
        #expect(String(decoding: out, as: UTF8.self) == #""a\"b\\c\nd\te\u0001¡👋\u007f""#)
        #expect(JSONText.escapedCount(Array("a\"b\\c\nd\te\u{01}¡👋\u{7F}".utf8)) == out.count - 2)
    }

    @Test(arguments: [0, 7, 10, 99, 100, 4_294_967_295, -1, -1234, Int64.max, Int64.min])
    func decimalDigits(value: Int64) {
        var out: [UInt8] = []
        JSONText.appendDecimal(value, to: &out)
        #expect(String(decoding: out, as: UTF8.self) == String(value))
    }
}

@Suite struct JSONValueTests {
    @Test func keepsKeyOrderNumberTextAndBooleans() throws {
        let value = try JSONValue.parse(#"{"b":1,"a":true,"c":1.50,"d":null,"e":[-0,"x"]}"#)
        #expect(value.objectMembers?.map(\.key) == ["b", "a", "c", "d", "e"])
        #expect(value["b"] == .number("1"))
        #expect(value["a"] == .bool(true))
        #expect(value["c"] == .number("1.50"))
        #expect(value["d"] == .null)
        #expect(value["b"]?.integerValue == 1)
        #expect(String(decoding: value.serialized(), as: UTF8.self) == #"{"b":1,"a":true,"c":1.50,"d":null,"e":[-0,"x"]}"#)
    }

    @Test func decodesEscapesAndSurrogatePairs() throws {
        let value = try JSONValue.parse(#""\u00a1Hola\n\"x\" \ud83d\udc4b""#)
        #expect(value == .string("¡Hola\n\"x\" 👋"))
        #expect(String(decoding: value.serialized(), as: UTF8.self) == #""¡Hola\n\"x\" 👋""#)
    }

    @Test(arguments: [
        (#"{"a":1,"a":2}"#, "duplicate key \"a\" at byte 8"),
        (#"{"a":}"#, "invalid value at byte 6"),
        (#"[1,]"#, "invalid value at byte 4"),
        (#""abc"#, "unterminated string at byte 5"),
        (#"{"a":1} x"#, "unexpected text after the JSON value at byte 9"),
        (#""\ud800""#, "unpaired surrogate in a string at byte 8"),
        ("01", "unexpected text after the JSON value at byte 2"),
    ])
    func errorsNameTheByte(text: String, message: String) {
        #expect { try JSONValue.parse(text) } throws: { ($0 as? JSONParseError)?.description == message }
    }

    @Test func refusesInvalidUTF8AndDeepNesting() {
        #expect(throws: JSONParseError.self) { try JSONValue.parse([0x22, 0xC0, 0x80, 0x22]) }
        #expect(throws: JSONParseError.self) { try JSONValue.parse(String(repeating: "[", count: 100) + String(repeating: "]", count: 100)) }
    }
}
