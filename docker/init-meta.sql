-- Metadata server: Airflow's database and MLflow's backend store.
create role airflow login password 'airflow';
create database airflow owner airflow;
create role mlflow login password 'mlflow';
create database mlflow owner mlflow;
