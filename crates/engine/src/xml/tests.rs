use serde_json::{Value, json};

use super::decode;
use super::tree::MAX_DEPTH;
use super::*;

fn field(name: &str, type_name: &str) -> RowField {
    RowField {
        name: name.to_owned(),
        type_name: type_name.to_owned(),
        xml_name: None,
        attribute: false,
        loaded: true,
    }
}

fn rows(body: &str, fields: &[RowField], protocol: Option<&str>) -> Value {
    let out = schema_driven(body.as_bytes(), fields, protocol, "line_items").unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn mxj_conventions_attributes_text_lists_and_empty_elements() {
    let value = to_mxj_value(
        br#"<?xml version="1.0" encoding="UTF-8"?>
        <!-- a comment -->
        <s:Root xmlns:s="urn:x" xmlns="urn:d" a="1">
          <s:Name>  n  </s:Name>
          <Empty/>
          <Also></Also>
          <Tag k="v">text</Tag>
          <Item>1</Item><Item>2</Item>
        </s:Root>"#,
    )
    .unwrap();
    assert_eq!(
        value,
        json!({"Root": {
            "-s": "urn:x", "-xmlns": "urn:d", "-a": "1",
            "Name": "n", "Empty": "", "Also": "",
            "Tag": {"-k": "v", "#text": "text"},
            "Item": ["1", "2"]
        }})
    );
}

#[test]
fn entities_character_references_and_cdata() {
    let value =
        to_mxj_value(b"<r><a>x &lt;&amp;&gt; &#65;&#x42; &quot;&apos;</a><b><![CDATA[<raw> & ]]>tail</b><c q=\"&amp;&#67;\"/></r>")
            .unwrap();
    assert_eq!(
        value,
        json!({"r": {"a": "x <&> AB \"'", "b": "<raw> & tail", "c": {"-q": "&C"}}})
    );
}

#[test]
fn malformed_bodies_are_errors() {
    for bad in [
        &b"<a><b></a>"[..],
        b"<a>",
        b"<a>&nope;</a>",
        b"not xml",
        b"<a x=1/>",
        b"\xff\xfe<a/>",
    ] {
        assert!(
            to_mxj_value(bad).is_err(),
            "{:?} decoded",
            String::from_utf8_lossy(bad)
        );
        assert!(schema_driven(bad, &[field("a", "string")], None, "line_items").is_err());
    }
    let deep = format!(
        "{}{}",
        "<a>".repeat(MAX_DEPTH + 1),
        "</a>".repeat(MAX_DEPTH + 1)
    );
    assert_eq!(
        decode::parse(deep.as_bytes()).unwrap_err(),
        XmlError::TooDeep
    );
}

#[test]
fn query_protocol_member_lists_typed_by_the_schema() {
    let body = r#"<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">
      <ListUsersResult>
        <IsTruncated>true</IsTruncated>
        <Marker>m-2</Marker>
        <Users>
          <member><UserName>alice</UserName><UserId>AID1</UserId><Path>/</Path>
            <Tags><member><Key>team</Key><Value>a</Value></member></Tags></member>
          <member><UserName>bob</UserName><UserId>AID2</UserId><Path>/ops/</Path>
            <PasswordLastUsed/></member>
        </Users>
      </ListUsersResult>
      <ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata>
    </ListUsersResponse>"#;
    let fields = [
        field("UserName", "string"),
        field("UserId", "string"),
        field("Path", "string"),
        field("PasswordLastUsed", "string"),
        field("Tags", "array"),
    ];
    assert_eq!(
        rows(body, &fields, Some("query")),
        json!({
            "line_items": [
                {"UserName": "alice", "UserId": "AID1", "Path": "/", "PasswordLastUsed": null,
                 "Tags": [{"Key": "team", "Value": "a"}]},
                {"UserName": "bob", "UserId": "AID2", "Path": "/ops/", "PasswordLastUsed": "",
                 "Tags": null}
            ],
            "IsTruncated": "true",
            "Marker": "m-2"
        })
    );
}

#[test]
fn one_element_lists_are_lists() {
    // S3 ListObjectsV2 with one object: <Contents> is not repeated, and `<Prefix/>` is an
    // empty element any-sdk would take for an empty list.
    let body = r#"<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
      <Name>b</Name><Prefix/><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>
      <Contents><Key>a.txt</Key><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>
    </ListBucketResult>"#;
    let fields = [
        field("Key", "string"),
        field("Size", "integer"),
        field("StorageClass", "string"),
    ];
    let out = rows(body, &fields, Some("rest-xml"));
    assert_eq!(
        out["line_items"],
        json!([{"Key": "a.txt", "Size": 12, "StorageClass": "STANDARD"}])
    );
    assert_eq!(out["IsTruncated"], "false");
    // One user in an IAM list, one bucket in a wrapped REST-XML list.
    let one_user = "<ListUsersResponse><ListUsersResult><Users><member><UserName>solo</UserName></member></Users></ListUsersResult></ListUsersResponse>";
    assert_eq!(
        rows(one_user, &[field("UserName", "string")], Some("query"))["line_items"],
        json!([{"UserName": "solo"}])
    );
    let one_bucket = "<ListAllMyBucketsResult><Owner><ID>o</ID><DisplayName>d</DisplayName></Owner><Buckets><Bucket><Name>only</Name></Bucket></Buckets></ListAllMyBucketsResult>";
    assert_eq!(
        rows(one_bucket, &[field("Name", "string")], Some("rest-xml"))["line_items"],
        json!([{"Name": "only"}])
    );
}

#[test]
fn the_list_holding_row_fields_wins_over_other_lists() {
    let body = "<ListBucketResult><CommonPrefixes><Prefix>a/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>b/</Prefix></CommonPrefixes>\
        <Contents><Key>k1</Key></Contents><Contents><Key>k2</Key></Contents></ListBucketResult>";
    assert_eq!(
        rows(body, &[field("Key", "string")], Some("rest-xml"))["line_items"],
        json!([{"Key": "k1"}, {"Key": "k2"}])
    );
}

#[test]
fn ec2_item_sets_and_empty_lists() {
    let body = "<DescribeVpcsResponse><requestId>r</requestId><vpcSet>\
        <item><vpcId>vpc-1</vpcId><isDefault>true</isDefault><cidrBlock>10.0.0.0/16</cidrBlock></item>\
        <item><vpcId>vpc-2</vpcId><isDefault>false</isDefault><cidrBlock>10.1.0.0/16</cidrBlock></item>\
        </vpcSet></DescribeVpcsResponse>";
    let fields = [
        field("vpcId", "string"),
        field("isDefault", "boolean"),
        field("cidrBlock", "string"),
    ];
    assert_eq!(
        rows(body, &fields, Some("ec2"))["line_items"],
        json!([
            {"vpcId": "vpc-1", "isDefault": true, "cidrBlock": "10.0.0.0/16"},
            {"vpcId": "vpc-2", "isDefault": false, "cidrBlock": "10.1.0.0/16"}
        ])
    );
    let empty = "<DescribeStacksResponse><DescribeStacksResult><Stacks/></DescribeStacksResult></DescribeStacksResponse>";
    assert_eq!(
        rows(empty, &[field("StackName", "string")], Some("query"))["line_items"],
        json!([])
    );
    assert_eq!(
        rows("  ", &[field("StackName", "string")], Some("query")),
        json!({"line_items": []})
    );
}

#[test]
fn singletons_typed_values_and_annotations() {
    let body = r#"<GetHostedZoneResponse><HostedZone Kind="public"><Id>/hostedzone/Z1</Id><Name>example.com.</Name>
        <ResourceRecordSetCount>7</ResourceRecordSetCount></HostedZone>
        <DelegationSet><NameServers><NameServer>ns1</NameServer><NameServer>ns2</NameServer></NameServers></DelegationSet>
        </GetHostedZoneResponse>"#;
    let fields = [
        field("HostedZone", "object"),
        field("DelegationSet", "object"),
        field("VPCs", "array"),
    ];
    assert_eq!(
        rows(body, &fields, Some("rest-xml"))["line_items"],
        json!([{
            "HostedZone": {"-Kind": "public", "Id": "/hostedzone/Z1", "Name": "example.com.",
                           "ResourceRecordSetCount": "7"},
            "DelegationSet": {"NameServers": {"NameServer": ["ns1", "ns2"]}},
            "VPCs": null
        }])
    );
    // Types: integers, numbers, booleans parsed; text kept when it is not one.
    let typed = "<R><Items><Item id=\"i-1\"><N>42</N><F>2.5</F><B>True</B><Bad>x</Bad><Rule>r</Rule></Item></Items></R>";
    let mut renamed = field("Rules", "array");
    renamed.xml_name = Some("Rule".to_owned());
    let mut id = field("Id", "string");
    id.xml_name = Some("id".to_owned());
    id.attribute = true;
    let fields = [
        field("N", "integer"),
        field("F", "number"),
        field("B", "boolean"),
        field("Bad", "integer"),
        renamed,
        id,
    ];
    assert_eq!(
        rows(typed, &fields, Some("rest-xml"))["line_items"],
        json!([{"N": 42, "F": 2.5, "B": true, "Bad": "x", "Rules": ["r"], "Id": "i-1"}])
    );
}

#[test]
fn aws_error_bodies() {
    let query = br#"<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error><Type>Sender</Type>
        <Code>AccessDenied</Code><Message>User: arn:aws:iam::1:user/x is not authorized &amp; denied</Message></Error>
        <RequestId>r</RequestId></ErrorResponse>"#;
    assert_eq!(
        aws_error(query),
        Some(AwsError {
            code: "AccessDenied".to_owned(),
            message: Some("User: arn:aws:iam::1:user/x is not authorized & denied".to_owned()),
        })
    );
    let s3 = b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message><BucketName>b</BucketName></Error>";
    assert_eq!(aws_error(s3).unwrap().code, "NoSuchBucket");
    let ec2 = b"<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>no</Message></Error></Errors><RequestID>r</RequestID></Response>";
    assert_eq!(aws_error(ec2).unwrap().code, "UnauthorizedOperation");
    assert_eq!(aws_error(br#"{"message": "json"}"#), None);
    assert_eq!(aws_error(b"<Error><Code>"), None);
    assert_eq!(aws_error(b"<Other><Code>x</Code></Other>"), None);
}

#[test]
fn fields_not_loaded_are_left_out_but_still_find_the_rows() {
    // Only `Size` is loaded; `Key` (not loaded) is what tells the rows from the `Owner` map.
    let body = "<ListBucketResult><Owner><ID>o</ID></Owner>\
                <Contents><Key>a</Key><Size>1</Size></Contents>\
                <Contents><Key>b</Key><Size>2</Size></Contents></ListBucketResult>";
    let fields = [
        RowField {
            loaded: false,
            ..field("Key", "string")
        },
        field("Size", "integer"),
    ];
    let out = rows(body, &fields, None);
    assert_eq!(out["line_items"], json!([{"Size": 1}, {"Size": 2}]));
}

#[test]
fn element_names_are_borrowed_from_the_body() {
    let body = "<r><a-b>1</a-b><ns:c x='1'>2</ns:c></r>";
    let (name, root) = decode::parse(body.as_bytes()).unwrap();
    assert!(matches!(name, std::borrow::Cow::Borrowed("r")));
    let Node::Map(entries) = root else {
        panic!("a map: {root:?}");
    };
    let keys: Vec<_> = entries.iter().map(|(k, _)| k.clone()).collect();
    assert!(
        matches!(keys[0], std::borrow::Cow::Borrowed("a-b")),
        "{keys:?}"
    );
    assert!(
        matches!(keys[1], std::borrow::Cow::Borrowed("c")),
        "{keys:?}"
    );
}
