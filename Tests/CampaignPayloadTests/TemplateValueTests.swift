import Testing
import AudienceIngest
import CampaignIO
import CampaignJSON
@testable import CampaignPayload
import ByteStreams

/// `{name|default}` for rows without a value, and `"{name:type}"` for JSON
/// numbers and booleans: what a real export with empty fields and numeric
/// ids needs.
@Suite struct TemplateValueTests {
    static func renderer(_ messages: String, custom: String = "{}", now: UInt32 = 1_700_000_000) throws -> PayloadRenderer {
        PayloadRenderer(job: try job(#"{"campaign":"c","format":"frame","maxPayload":2048,"messages":{"en":\#(messages)},"custom":\#(custom)}"#), now: now)
    }

    @Test func syntaxOfDefaultsAndTypes() throws {
        #expect(try Template("Hi {first_name|there}").parts == [.literal(Array("Hi ".utf8)), .variable(.init(name: "first_name", defaultValue: "there"))])
        #expect(try Template("{first_name|}").parts == [.variable(.init(name: "first_name", defaultValue: ""))])
        #expect(try Template("{count:int|0}").typedVariable == .init(name: "count", type: .int, defaultValue: "0"))
        #expect(try Template("{vip:bool}").typedVariable == .init(name: "vip", type: .bool))
        #expect(try Template("{name}").typedVariable == nil, "an untyped variable stays text")
        #expect(throws: Template.SyntaxError.self) { try Template("id {order_id:number}") }
        #expect(throws: Template.SyntaxError.self) { try Template("{count:float}") }
        #expect(throws: Template.SyntaxError.self) { try Template("{count:int|zero}") }
        #expect(throws: Template.SyntaxError.self) { try Template("{:int}") }
    }

    @Test func aDefaultStandsInForAnAbsentOrEmptyValueAndIsCounted() throws {
        let r = try Self.renderer(#"{"alert":"Hi {first_name|there}, {city|}!"}"#)
        for row in [AudienceRow(line: 2, values: [nil, nil]), AudienceRow(line: 2, values: ["", ""])] {
            let arena = ByteArena(capacity: 256)
            var defaulted: UInt64 = 0
            let outcome = r.render(message: 0, row: row, columns: [0, 1], maxBytes: 2048, appendingTo: arena, defaulted: &defaulted)
            #expect(outcome == .fitted)
            #expect(String(decoding: arena.all, as: UTF8.self) == #"{"aps":{"alert":"Hi there, !"}}"#)
            #expect(defaulted == 0b11)
        }
        let (text, outcome) = render(r, ["first_name": "Ana", "city": "Lima"])
        #expect(outcome == .fitted && text == #"{"aps":{"alert":"Hi Ana, Lima!"}}"#)
    }

    @Test func aDefaultIsEscapedLikeAValue() throws {
        let r = try Self.renderer(#"{"alert":"{q|say \"hi\"}"}"#)
        #expect(render(r, [:]).0 == #"{"aps":{"alert":"say \"hi\""}}"#)
    }

    @Test func typedValuesAreJSONNumbersAndBooleans() throws {
        let r = try Self.renderer(#"{"alert":"x"}"#, custom: #"{"order_id":"{order_id:number}","count":"{count:int|0}","vip":"{vip:bool}","ts":"{now:int}"}"#)
        let (text, outcome) = render(r, ["order_id": "1234.50", "count": " 007 ", "vip": "Yes"])
        #expect(outcome == .fitted)
        #expect(text == #"{"aps":{"alert":"x"},"order_id":1234.50,"count":7,"vip":true,"ts":1700000000}"#)
        let parsed = try JSONValue.parse(Array(text.utf8))
        #expect(parsed["count"] == .number("7") && parsed["vip"] == .bool(true))
        #expect(render(r, ["order_id": "-1e3", "vip": "0"]).0 == #"{"aps":{"alert":"x"},"order_id":-1e3,"count":0,"vip":false,"ts":1700000000}"#)
    }

    @Test(arguments: [
        ("order_id", "12a", RenderOutcome.invalidValue(variable: "order_id", type: .number, value: "12a")),
        ("order_id", "01", .invalidValue(variable: "order_id", type: .number, value: "01")),
        ("count", "1.5", .invalidValue(variable: "count", type: .int, value: "1.5")),
        ("vip", "maybe", .invalidValue(variable: "vip", type: .bool, value: "maybe")),
    ])
    func aValueNotOfItsTypeIsNamed(name: String, value: String, expected: RenderOutcome) throws {
        let r = try Self.renderer(#"{"alert":"x"}"#, custom: #"{"order_id":"{order_id:number|0}","count":"{count:int|0}","vip":"{vip:bool|false}"}"#)
        #expect(render(r, [name: value]).1 == expected)
    }

    @Test func aMissingValueWithoutADefaultIsStillRefused() throws {
        let r = try Self.renderer(#"{"alert":"x"}"#, custom: #"{"n":"{n:int}"}"#)
        #expect(render(r, [:]).1 == .missingVariable("n"))
    }

    @Test func aBadgeTakesADefault() throws {
        let r = try Self.renderer(#"{"alert":"x","badge":"{badge|0}"}"#)
        #expect(render(r, [:]).0 == #"{"aps":{"alert":"x","badge":0}}"#)
        #expect(render(r, ["badge": "3"]).0 == #"{"aps":{"alert":"x","badge":3}}"#)
    }

    /// What `validate` shows and the CSV header check needs: each variable as first written, and which need a column.
    @Test func theRendererKnowsEachVariablesDefaultAndWhichAreRequired() throws {
        let r = try Self.renderer(#"{"alert":"Hi {first_name|there} {last}","badge":"{badge|0}"}"#, custom: #"{"n":"{n:int}","t":"{now:int}"}"#)
        #expect(r.variables == ["first_name", "last", "badge", "n"], "now is built in, not a column")
        #expect(r.declarations.map(\.source) == ["{first_name|there}", "{last}", "{badge|0}", "{n:int}"])
        #expect(r.requiredVariables == ["last", "n"])
    }

    @Test func typesAreRefusedWhereAPNsReadsText() {
        #expect(jobError(#"{"campaign":"c","messages":{"en":{"alert":"{n:int}"}}}"#)?.contains("is text") == true)
        #expect(jobError(#"{"campaign":"c","messages":{"en":{"alert":"x","sound":"{s:bool}"}}}"#)?.contains("is text") == true)
        #expect(jobError(#"{"campaign":"c","messages":{"en":{"alert":"x","badge":"{b:bool}"}}}"#) != nil)
        #expect(jobError(#"{"campaign":"c","messages":{"en":{"alert":"x","badge":"{b|-1}"}}}"#) != nil)
        #expect(jobError(#"{"campaign":"c","messages":{"en":{"alert":"x"}},"custom":{"n":"{n:int|0}"}}"#) == nil)
    }
}
