package patentxml

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const v4Grant = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN" dtd-version="v4.2 2006-08-23" file="US07272630-20070925.XML">
<us-bibliographic-data-grant>
<publication-reference><document-id><country>US</country><doc-number>07272630</doc-number><kind>B2</kind><date>20070925</date></document-id></publication-reference>
<application-reference appl-type="utility"><document-id><country>US</country><doc-number>10123456</doc-number><date>20040102</date></document-id></application-reference>
<classifications-ipcr><classification-ipcr><section>B</section><class>60</class><subclass>L</subclass><main-group>11</main-group><subgroup>18</subgroup></classification-ipcr></classifications-ipcr>
<classifications-cpc><main-cpc><classification-cpc><section>B</section><class>60</class><subclass>L</subclass><main-group>11</main-group><subgroup>1809</subgroup></classification-cpc></main-cpc></classifications-cpc>
<invention-title id="t">Widget &amp; gadget</invention-title>
<us-references-cited><us-citation><classification-cpc-text>X99Z 1/00</classification-cpc-text></us-citation></us-references-cited>
</us-bibliographic-data-grant>
<abstract id="abstract"><p id="p-0001" num="0000">A widget at 5&#xb0; C.&mdash;really.</p></abstract>
<drawings><figure><img file="x.TIF"/></figure></drawings>
<description id="description">
<?BRFSUM description="Brief Summary" end="lead"?>
<heading id="h-1" level="1">FIELD</heading>
<p id="p-0002" num="0001">As in <figref idref="DRAWINGS">FIG. 1</figref>, x<sub>2</sub> is <maths id="M1"><math><mi>a</mi><mo>+</mo><mn>1</mn></math></maths> here.</p>
<p id="p-0003" num="0002"><tables id="T1"><table><tgroup cols="2"><thead><row><entry>Name</entry><entry>Value</entry></row></thead>
<tbody><row><entry>alpha</entry><entry/><entry>1.5</entry></row><row><entry/></row></tbody></tgroup></table></tables></p>
<p id="p-0004" num="0003"><chemistry id="C1"><img file="c.TIF"/></chemistry></p>
</description>
<us-claim-statement>What is claimed is:</us-claim-statement>
<claims id="claims">
<claim id="CLM-00001" num="00001"><claim-text>1. A widget comprising:<claim-text>a part; and</claim-text><claim-text>another part.</claim-text></claim-text></claim>
<claim id="CLM-00002" num="00002"><claim-text>2. The widget of <claim-ref idref="CLM-00001">claim 1</claim-ref>, blue.</claim-text></claim>
</claims>
</us-patent-grant>
`

const v4Application = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-application SYSTEM "us-patent-application-v43-2012-12-04.dtd" [ ]>
<us-patent-application lang="EN" dtd-version="v4.3 2012-12-04">
<us-bibliographic-data-application>
<publication-reference><document-id><country>US</country><doc-number>20130014297</doc-number><kind>A1</kind><date>20130117</date></document-id></publication-reference>
<application-reference appl-type="utility"><document-id><country>US</country><doc-number>13181234</doc-number><date>20110712</date></document-id></application-reference>
<classification-ipc><edition>7</edition><main-classification>A41D  31/00</main-classification><further-classification>A23G   1/50</further-classification></classification-ipc>
<invention-title>Glove</invention-title>
</us-bibliographic-data-application>
<abstract><p>A glove.</p></abstract>
<description><p num="0001">Gloves are &lsquo;good&rsquo;.</p></description>
<claims><claim num="1"><claim-text>1. A glove.</claim-text></claim></claims>
</us-patent-application>`

const v25Grant = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE PATDOC SYSTEM "ST32-US-Grant-025xml.dtd" [
<!ENTITY US06530116-20030311-D00000.TIF SYSTEM "US06530116-20030311-D00000.TIF" NDATA TIF>
<!ENTITY bomb "&bomb;&bomb;">
]>
<PATDOC DTD="2.5" STATUS="Build 20030116">
<SDOBI>
<B100><B110><DNUM><PDAT>6530116</PDAT></DNUM></B110><B130><PDAT>B2</PDAT></B130><B140><DATE><PDAT>20030311</PDAT></DATE></B140><B190><PDAT>US</PDAT></B190></B100>
<B200><B210><DNUM><PDAT>09782496</PDAT></DNUM></B210><B220><DATE><PDAT>20010213</PDAT></DATE></B220></B200>
<B500><B510><B511><PDAT>A47L  514</PDAT></B511></B510><B540><STEXT><PDAT>Vacuum &lgr; cleaner</PDAT></STEXT></B540></B500>
</SDOBI>
<SDOAB><BTEXT><PARA ID="P-00001" LVL="0"><PTEXT><PDAT>A vacuum &bomb; cleaner.</PDAT></PTEXT></PARA></BTEXT></SDOAB>
<SDODE><BRFSUM><BTEXT><H LVL="1"><STEXT><PDAT>FIELD</PDAT></STEXT></H>
<PARA ID="P-00002" LVL="0"><PTEXT><PDAT>See </PDAT><FGREF ID="DRAWINGS"><PDAT>FIG. 1</PDAT></FGREF><PDAT>.</PDAT><EMI ID="EMI-00001" FILE="x.TIF"/></PTEXT></PARA></BTEXT></BRFSUM></SDODE>
<SDOCL><H LVL="1"><STEXT><PDAT>We claim: </PDAT></STEXT></H><CL>
<CLM ID="CLM-00001"><PARA ID="P-00036" LVL="0"><PTEXT><PDAT>1. A vacuum comprising:</PDAT></PTEXT></PARA>
<CLMSTEP LVL="2"><PTEXT><PDAT>a housing.</PDAT></PTEXT></CLMSTEP></CLM>
<CLM ID="CLM-00002"><PARA ID="P-00037" LVL="0"><PTEXT><PDAT>2. The vacuum of </PDAT><CLREF ID="CLM-00001"><PDAT>claim 1</PDAT></CLREF><PDAT>.</PDAT></PTEXT></PARA></CLM>
</CL></SDOCL>
</PATDOC>
`

const papApplication = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE patent-application-publication SYSTEM "pap-v16-2002-01-01.dtd" >
<patent-application-publication>
<subdoc-bibliographic-information>
<document-id><doc-number>20040000002</doc-number><kind-code>A1</kind-code><document-date>20040101</document-date></document-id>
<domestic-filing-data><application-number><doc-number>10189364</doc-number></application-number><filing-date>20020627</filing-date></domestic-filing-data>
<technical-information><classification-ipc><classification-ipc-primary><ipc>A41B001/00</ipc></classification-ipc-primary></classification-ipc>
<title-of-invention>Garment</title-of-invention></technical-information>
</subdoc-bibliographic-information>
<subdoc-abstract><paragraph id="A-0001" lvl="0">A garment.</paragraph></subdoc-abstract>
<subdoc-description><summary-of-invention><section><heading lvl="1">BACKGROUND </heading>
<paragraph id="P-0001" lvl="0"><number>[0001]</number> 1. Field </paragraph></section></summary-of-invention></subdoc-description>
<subdoc-claims><heading lvl="1">What is claimed is: </heading>
<claim id="CLM-00001"><claim-text><highlight><bold>1</bold></highlight>. A garment, comprising: 
<claim-text>an upper portion; and </claim-text></claim-text></claim></subdoc-claims>
</patent-application-publication>
`

func TestParseFormats(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want Patent
	}{
		{"v4 grant", v4Grant, Patent{
			DocID: "US07272630B2", Country: "US", DocNumber: "07272630", Kind: "B2", Title: "Widget & gadget",
			PublicationDate: "20070925", ApplicationNumber: "10123456", FilingDate: "20040102",
			CPC: []string{"B60L 11/1809"}, IPC: []string{"B60L 11/18"}, DTDVersion: "v4.2 2006-08-23", DocType: Grant,
			Abstract: []string{"A widget at 5° C.—really."},
			Claims:   []string{"1. A widget comprising:", "a part; and", "another part.", "2. The widget of claim 1, blue."},
			Description: []string{"FIELD", "As in FIG. 1, x2 is a+1 here.",
				"Name | Value", "alpha | 1.5"},
		}},
		{"v4 application", v4Application, Patent{
			DocID: "US20130014297A1", Country: "US", DocNumber: "20130014297", Kind: "A1", Title: "Glove",
			PublicationDate: "20130117", ApplicationNumber: "13181234", FilingDate: "20110712",
			IPC: []string{"A41D 31/00", "A23G 1/50"}, DTDVersion: "v4.3 2012-12-04", DocType: Application,
			Abstract: []string{"A glove."}, Claims: []string{"1. A glove."}, Description: []string{"Gloves are ‘good’."},
		}},
		{"v2.5 grant", v25Grant, Patent{
			DocID: "US06530116B2", Country: "US", DocNumber: "06530116", Kind: "B2", Title: "Vacuum λ cleaner",
			PublicationDate: "20030311", ApplicationNumber: "09782496", FilingDate: "20010213",
			IPC: []string{"A47L 514"}, DTDVersion: "2.5", DocType: Grant,
			Abstract:        []string{"A vacuum cleaner."},
			Claims:          []string{"1. A vacuum comprising:", "a housing.", "2. The vacuum of claim 1."},
			Description:     []string{"FIELD", "See FIG. 1."},
			UnknownEntities: 1,
		}},
		{"pap-v16 application", papApplication, Patent{
			DocID: "US20040000002A1", Country: "US", DocNumber: "20040000002", Kind: "A1", Title: "Garment",
			PublicationDate: "20040101", ApplicationNumber: "10189364", FilingDate: "20020627",
			IPC: []string{"A41B001/00"}, DTDVersion: "pap-v16-2002-01-01", DocType: Application,
			Abstract: []string{"A garment."}, Claims: []string{"1. A garment, comprising:", "an upper portion; and"},
			Description: []string{"BACKGROUND", "1. Field"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDocument([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestParseDesignGrantWithoutAbstract(t *testing.T) {
	doc := strings.NewReplacer("07272630", "D584295", "<kind>B2", "<kind>S1").Replace(v4Grant)
	doc = doc[:strings.Index(doc, "<abstract")] + doc[strings.Index(doc, "</abstract>")+len("</abstract>"):]
	p, err := ParseDocument([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if p.DocID != "USD0584295S1" || len(p.Abstract) != 0 || len(p.Claims) == 0 {
		t.Errorf("DocID %q abstract %q claims %q", p.DocID, p.Abstract, p.Claims)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
		notPatent       string // skip reason when the document is not a patent
	}{
		{"sequence listing", `<?xml version="1.0"?><!DOCTYPE sequence-cwu SYSTEM "x.dtd" [ ]><sequence-cwu><s100>x</s100></sequence-cwu>`, "", "sequence-listing"},
		{"unknown root", `<?xml version="1.0"?><foo/>`, "", "not-patent:foo"},
		{"truncated", v4Grant[:len(v4Grant)/2], "truncated", ""},
		{"empty", "", "no root element", ""},
		{"no doc number", strings.Replace(v4Grant, "<doc-number>07272630</doc-number>", "", 1), "no publication document number", ""},
		{"bad doc number", strings.Replace(v4Grant, "<doc-number>07272630", "<doc-number>0727 2630", 1), "malformed", ""},
		{"deep", "<us-patent-grant>" + strings.Repeat("<p>", 1000), "nested deeper", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseDocument([]byte(tc.doc))
			if err == nil {
				t.Fatalf("no error, got %+v", p)
			}
			var np *NotPatentError
			if tc.notPatent != "" {
				if !errors.As(err, &np) || !errors.Is(err, ErrNotPatent) || np.Reason() != tc.notPatent {
					t.Fatalf("err %v, want not-patent %q", err, tc.notPatent)
				}
				return
			}
			if errors.Is(err, ErrNotPatent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	// a truncated document still names itself, so that the bad input can be traced
	p, _ := ParseDocument([]byte(v4Grant[:len(v4Grant)/2]))
	if p.DocID != "US07272630B2" {
		t.Errorf("truncated DocID %q", p.DocID)
	}
}

func TestDecodeEntities(t *testing.T) {
	tests := []struct {
		in, want string
		unknown  int
	}{
		{"a &amp; b &lt;c&gt; &quot;&apos;", `a & b <c> "'`, 0},
		{"&#x201c;q&#8221; &#0; &#xD800; &#x110000;", "“q”   ", 0},
		{"&lsquo;&rsquo;&ldquo;&rdquo;&mdash;&ndash;&deg;&plusmn;&times;&micro;&bull;&hellip;", "‘’“”—–°±×µ•…", 0},
		{"&lsqb;&rsqb;&frac12;&frac15;&equals;&plus;&minus;&bsol;&copy;&uuml;", "[]½⅕=+−\\©ü", 0},
		{"&lgr;&Dgr;&ohgr;", "λΔω", 0},
		{"x&nosuch;y &notit; z", "xy  z", 2},
		{"AT&T R&D; & a&b", "AT&T R&D; & a&b", 0},
		{"x &D; y", "x  y", 1},
		{"&#xZZ; &;", " &;", 0},
	}
	for _, tc := range tests {
		n := 0
		if got := decodeEntities([]byte(tc.in), &n); got != tc.want || n != tc.unknown {
			t.Errorf("decode(%q) = %q, %d unknown; want %q, %d", tc.in, got, n, tc.want, tc.unknown)
		}
	}
}

func TestScanTolerance(t *testing.T) {
	// stray '<', unquoted attributes, an unmatched end tag and an unclosed element
	doc := `<us-patent-grant><abstract><p a=1 b='x'>if a < b</q> then<p>next</abstract></us-patent-grant>`
	tr, err := scan([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	got := render(child(tr.root, "abstract"), false)
	if want := []string{"if a < b then", "next"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q want %q", got, want)
	}
}

func FuzzParseDocument(f *testing.F) {
	for _, s := range []string{v4Grant, v4Application, v25Grant, papApplication, "<a>&#x;<!--", "<a b=\"&lt;\"/><![CDATA[x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseDocument(data)
		if err == nil && p.DocID == "" {
			t.Fatalf("no error and no DocID")
		}
	})
}
