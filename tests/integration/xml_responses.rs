//! XML responses of the current StackQL registry's `aws` provider (documents unchanged):
//! `schema_driven_xml_v0.1.0` over the query protocol (IAM) and REST-XML (S3), next pages
//! by `Marker`/`IsTruncated` and S3's continuation token, a `golang_template_mxj_v0.3.0`
//! method (SNS), and AWS error bodies, through a mock upstream answering with the XML
//! shapes of AWS's API references.

use crate::mock::{Mock, Reply};
use crate::support::corpus::row_lines;
use crate::support::current::{context, current_registry, engine};

const AWS: &str = "src/aws/v00.00.00000/provider.yaml";

fn xml(body: &str) -> Reply {
    Reply::bytes("text/xml", body.as_bytes().to_vec())
}

const LIST_USERS: &str = "/?Action=ListUsers&Version=2010-05-08";

/// IAM ListUsers pages as the IAM API reference shows them.
fn users_page(users: &[(&str, &str, &str)], marker: Option<&str>) -> Reply {
    let mut body = String::from(
        r#"<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ListUsersResult><Users>"#,
    );
    for (name, id, created) in users {
        body.push_str(&format!(
            "<member><UserId>{id}</UserId><Path>/division_abc/subdivision_xyz/engineering/</Path>\
             <UserName>{name}</UserName><Arn>arn:aws:iam::123456789012:user/division_abc/subdivision_xyz/engineering/{name}</Arn>\
             <CreateDate>{created}</CreateDate></member>"
        ));
    }
    body.push_str("</Users>");
    match marker {
        Some(marker) => body.push_str(&format!(
            "<IsTruncated>true</IsTruncated><Marker>{marker}</Marker>"
        )),
        None => body.push_str("<IsTruncated>false</IsTruncated>"),
    }
    body.push_str(
        "</ListUsersResult><ResponseMetadata><RequestId>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</RequestId></ResponseMetadata></ListUsersResponse>",
    );
    xml(&body)
}

#[tokio::test]
async fn iam_users_over_two_pages_by_marker() {
    let Some(registry) = current_registry(&[AWS, "src/aws/v00.00.00000/services/iam.yaml"]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        LIST_USERS,
        users_page(
            &[
                ("Andrew", "AID2MAB8DPLSRHEXAMPLE", "2012-09-05T19:38:48Z"),
                ("Jackie", "AIDIODR4TAW7CSEXAMPLE", "2014-04-09T15:43:45Z"),
            ],
            Some("m-2 &amp; more"),
        ),
    );
    // The marker goes back as the `Marker` query parameter ListUsers declares.
    mock.route(
        &format!("{LIST_USERS}&Marker=m-2+%26+more"),
        users_page(&[("Zoe", "AIDZOE", "2020-01-01T00:00:00Z")], None),
    );
    let e = engine(registry.path(), "aws", &mock);
    let out = e
        .execute(
            &context(),
            "SELECT UserName, UserId, Path, Arn, CreateDate, PasswordLastUsed \
             FROM aws.iam.users ORDER BY UserName",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "Andrew|AID2MAB8DPLSRHEXAMPLE|/division_abc/subdivision_xyz/engineering/|arn:aws:iam::123456789012:user/division_abc/subdivision_xyz/engineering/Andrew|2012-09-05T19:38:48Z|NULL",
            "Jackie|AIDIODR4TAW7CSEXAMPLE|/division_abc/subdivision_xyz/engineering/|arn:aws:iam::123456789012:user/division_abc/subdivision_xyz/engineering/Jackie|2014-04-09T15:43:45Z|NULL",
            "Zoe|AIDZOE|/division_abc/subdivision_xyz/engineering/|arn:aws:iam::123456789012:user/division_abc/subdivision_xyz/engineering/Zoe|2020-01-01T00:00:00Z|NULL",
        ]
    );
    // Sent as StackQL sends them (`get_query_to_post_form_utf_8`): the query as a form.
    let forms: Vec<(String, String)> = mock
        .requests()
        .into_iter()
        .map(|r| (format!("{} {}", r.method, r.path), r.body_text()))
        .collect();
    assert_eq!(
        forms,
        [
            (
                "POST /".to_owned(),
                "Action=ListUsers&Version=2010-05-08".to_owned()
            ),
            (
                "POST /".to_owned(),
                "Action=ListUsers&Version=2010-05-08&Marker=m-2+%26+more".to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn s3_buckets_rest_xml_with_one_bucket() {
    let Some(registry) = current_registry(&[AWS, "src/aws/v00.00.00000/services/s3.yaml"]) else {
        return;
    };
    let mock = Mock::start().await;
    // ListBuckets (S3 API reference) with a single bucket: still a row.
    mock.route(
        "/",
        xml(r#"<?xml version="1.0" encoding="UTF-8"?>
<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Buckets>
    <Bucket>
      <BucketRegion>us-east-1</BucketRegion>
      <CreationDate>2019-12-11T23:32:47+00:00</CreationDate>
      <Name>amzn-s3-demo-bucket</Name>
    </Bucket>
  </Buckets>
  <Owner>
    <DisplayName>Account+Name</DisplayName>
    <ID>AIDACKCEVSQ6C2EXAMPLE</ID>
  </Owner>
  <Prefix/>
</ListAllMyBucketsResult>"#),
    );
    let e = engine(registry.path(), "aws", &mock);
    let out = e
        .execute(
            &context(),
            "SELECT Name, CreationDate, BucketRegion, BucketArn FROM aws.s3.buckets",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        ["amzn-s3-demo-bucket|2019-12-11T23:32:47+00:00|us-east-1|NULL"]
    );
}

fn objects_page(keys: &[(&str, u64)], next: Option<&str>) -> Reply {
    let mut body = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><Prefix/>"#,
    );
    body.push_str(&format!(
        "<KeyCount>{}</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>{}</IsTruncated>",
        keys.len(),
        next.is_some()
    ));
    if let Some(next) = next {
        body.push_str(&format!(
            "<NextContinuationToken>{next}</NextContinuationToken>"
        ));
    }
    for (key, size) in keys {
        body.push_str(&format!(
            "<Contents><Key>{key}</Key><LastModified>2014-11-21T19:40:05.000Z</LastModified>\
             <ETag>&quot;70ee1738b6b21e2c8a43f3a5ab0eee71&quot;</ETag><Size>{size}</Size>\
             <StorageClass>STANDARD</StorageClass></Contents>"
        ));
    }
    body.push_str("</ListBucketResult>");
    xml(&body)
}

#[tokio::test]
async fn s3_objects_v2_over_two_pages_by_continuation_token() {
    let Some(registry) = current_registry(&[AWS, "src/aws/v00.00.00000/services/s3.yaml"]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/bucket?list-type=2",
        objects_page(
            &[("happyface.jpg", 11), ("photos/2006/a.jpg", 0)],
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="),
        ),
    );
    mock.route(
        "/bucket?list-type=2&continuation-token=1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36Hy4vbOwM%3D",
        objects_page(&[("zebra.png", 434234)], None),
    );
    let e = engine(registry.path(), "aws", &mock);
    let out = e
        .execute(
            &context(),
            "SELECT Key, Size, typeof(Size) AS t, ETag, StorageClass \
             FROM aws.s3.objects_v2s WHERE bucket = 'bucket' ORDER BY Key",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "happyface.jpg|11|integer|\"70ee1738b6b21e2c8a43f3a5ab0eee71\"|STANDARD",
            "photos/2006/a.jpg|0|integer|\"70ee1738b6b21e2c8a43f3a5ab0eee71\"|STANDARD",
            "zebra.png|434234|integer|\"70ee1738b6b21e2c8a43f3a5ab0eee71\"|STANDARD",
        ]
    );
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn sns_mxj_template_over_the_xml_map() {
    let Some(registry) = current_registry(&[AWS, "src/aws/v00.00.00000/services/sns.yaml"]) else {
        return;
    };
    let mock = Mock::start().await;
    let route = "/?Action=ListPhoneNumbersOptedOut&Version=2010-03-31";
    let page = |numbers: &[&str]| {
        let members: String = numbers
            .iter()
            .map(|n| format!("<member>{n}</member>"))
            .collect();
        xml(&format!(
            r#"<ListPhoneNumbersOptedOutResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
  <ListPhoneNumbersOptedOutResult><phoneNumbers>{members}</phoneNumbers></ListPhoneNumbersOptedOutResult>
  <ResponseMetadata><RequestId>52ea6d51-bcf4-4bdb-8a1e-7c1e1d1c7a2a</RequestId></ResponseMetadata>
</ListPhoneNumbersOptedOutResponse>"#
        ))
    };
    mock.route(route, page(&["+15555550100", "+15555550101"]));
    let e = engine(registry.path(), "aws", &mock);
    let sql = "SELECT phone_number FROM aws.sns.phone_numbers_opted_outs ORDER BY phone_number";
    let out = e
        .execute(&context(), sql)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["+15555550100", "+15555550101"]);
    // One member is a string, not a list, in mxj's map: the template's own branch.
    mock.route(route, page(&["+15555550199"]));
    let out = e
        .execute(&context(), sql)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["+15555550199"]);
}

#[tokio::test]
async fn aws_error_bodies_and_malformed_xml_are_clear_errors() {
    let Some(registry) = current_registry(&[AWS, "src/aws/v00.00.00000/services/iam.yaml"]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        LIST_USERS,
        Reply::status(
            403,
            r#"<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">
  <Error><Type>Sender</Type><Code>AccessDenied</Code>
    <Message>User: arn:aws:iam::123456789012:user/x is not authorized to perform: iam:ListUsers &lt;t0ken&gt;</Message></Error>
  <RequestId>r-1</RequestId></ErrorResponse>"#,
        ),
    );
    let e = engine(registry.path(), "aws", &mock);
    let err = e
        .execute(&context(), "SELECT UserName FROM aws.iam.users")
        .await
        .expect_err("403");
    let message = err.to_string();
    assert!(
        message.contains("resource 'users', method 'list_users': AWS error AccessDenied: User: arn:aws:iam::123456789012:user/x is not authorized to perform: iam:ListUsers"),
        "{message}"
    );
    assert!(
        !message.contains("t0ken"),
        "the credential is scrubbed: {message}"
    );

    mock.route(
        LIST_USERS,
        xml("<ListUsersResponse><ListUsersResult><Users><member></Users>"),
    );
    let err = e
        .execute(&context(), "SELECT UserName FROM aws.iam.users")
        .await
        .expect_err("malformed");
    let message = err.to_string();
    assert!(
        message.contains("'aws.iam.users'")
            && message.contains("method 'list_users'")
            && message.contains("not well-formed"),
        "{message}"
    );
}
